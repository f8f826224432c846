package faults

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestRedisStoppedUnderLoad: with on_store_failure local, the gateway keeps
// answering (no 5xx) while Redis is down, and goes back to store decisions
// soon after it returns.
func TestRedisStoppedUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf(`
redis: {addrs: [%q]}
limits: {ip: 0, tenant: 100000, store_timeout: 50ms, on_store_failure: local, breaker_cooldown: 100ms}
`, srv.Addr))
	gws := []*harness.Gateway{harness.Start(t, cfg), harness.Start(t, cfg)}
	var stop atomic.Bool
	var codes sync.Map
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				c := harness.Status("GET", gws[(w+i)%2].URL+"/load", "X-API-Key", "gold-key")
				v, _ := codes.LoadOrStore(c, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	srv.Stop()
	harness.Eventually(t, 5*time.Second, "breaker open", func() bool { return !gws[0].StoreHealthy(t) })
	time.Sleep(time.Second)
	srv.Restart()
	back := harness.Eventually(t, 5*time.Second, "store decisions again", func() bool {
		return gws[0].StoreHealthy(t) && gws[1].StoreHealthy(t)
	})
	t.Logf("back to store decisions %v after Redis restarted", back.Round(time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	summary := map[int]int64{}
	codes.Range(func(k, v any) bool { summary[k.(int)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("answers by status: %v", summary)
	for c, n := range summary {
		assert.Equal(t, http.StatusOK, c, "%d answers with status %d", n, c)
	}
	assert.Less(t, back, time.Second, "decisions come back to the store within a second")
	assert.Positive(t, harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local"))
}

// TestRedisSlow: Redis paused past store_timeout: the gateway answers from
// its local fallback, then returns to Redis.
func TestRedisSlow(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, fmt.Sprintf(`
redis: {addrs: [%q]}
limits: {ip: 0, tenant: 100000, store_timeout: 20ms, breaker_cooldown: 100ms}
`, srv.Addr)))
	require.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/s", "", "X-API-Key", "gold-key").Status)
	srv.Pause()
	for i := range 20 {
		a := harness.Do(t, "GET", g.URL+fmt.Sprintf("/s%d", i), "", "X-API-Key", "gold-key", "X-Forwarded-For", "1.2.3.4")
		require.Equal(t, http.StatusOK, a.Status)
	}
	assert.False(t, g.StoreHealthy(t))
	srv.Resume()
	harness.Eventually(t, 5*time.Second, "store decisions again", func() bool {
		harness.Do(t, "GET", g.URL+"/s", "", "X-API-Key", "gold-key")
		return g.StoreHealthy(t)
	})
}

// TestStartsWhenRedisComesUpLate: a pod started before its Redis waits for it.
func TestStartsWhenRedisComesUpLate(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	up := harness.StartUpstream(t)
	go func() {
		time.Sleep(700 * time.Millisecond)
		srv.Restart()
	}()
	g := harness.Start(t, harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q], connect_wait: 20s}\n", srv.Addr)))
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/late", "", "X-API-Key", "gold-key").Status)
}

// TestRedisLosesItsData: a tenant and a rule created through the admin API
// survive a Redis that shuts down without saving and comes back empty on the
// same port: a pod writes them back within one resync, and both pods go on
// enforcing them. The rule's window (2s) has passed by then, so the budget is
// whole again; a loss within the window is TestFaultRedisEmptiedMidWindow's.
func TestRedisLosesItsData(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	// A slow call under -race must not fall back to local shares, which
	// would count a request outside Redis and make the exact counts below
	// wrong for a reason this test is not about.
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 0, store_timeout: 1s}\n", srv.Addr))
	a, b := harness.Start(t, cfg), harness.Start(t, cfg)
	require.Equal(t, http.StatusOK, harness.Do(t, "PUT", a.Admin+"/v1/tenants/lostco", `{"plan":"STANDARD","api_keys":["lostco-key"]}`).Status)
	resp := harness.Do(t, "PUT", a.Admin+"/v1/rules/lostco/default", `{"algorithm":"sliding_window","limit":3,"window":"2s"}`)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	harness.Eventually(t, 3*time.Second, "rule on pod B", func() bool {
		return harness.Do(t, "GET", b.Admin+"/v1/rules/lostco/default", "").Status == http.StatusOK
	})
	require.Equal(t, 3, harness.Passed(t, []*harness.Gateway{a, b}, 6, "lostco-key"), "the rule holds before")
	counted := time.Now()
	restores := harness.Scrape(t, a.Admin, "sentinel_catalog_restores_total")

	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	defer rc.Close()
	_ = rc.Do(context.Background(), rc.B().Shutdown().Nosave().Build()).Error() // the connection drops
	srv.Restart()                                                               // empty, same port
	held := func() bool {
		ctx := context.Background()
		rules, err1 := rc.Do(ctx, rc.B().Hkeys().Key("sentinel:{catalog}:rules").Build()).AsStrSlice()
		tenants, err2 := rc.Do(ctx, rc.B().Hkeys().Key("sentinel:{catalog}:tenants").Build()).AsStrSlice()
		return err1 == nil && err2 == nil && slices.Contains(rules, "lostco:default") && slices.Contains(tenants, "lostco")
	}
	took := harness.Eventually(t, 6*time.Second, "redis holds the tenant and the rule again", held)
	t.Logf("catalog back in redis %v after it restarted empty", took.Round(time.Millisecond))
	assert.Less(t, took, 5*time.Second, "within one resync (5s)")
	assert.Equal(t, 1.0, harness.Scrape(t, a.Admin, "sentinel_catalog_restores_total")-restores, "one pod restores")

	time.Sleep(200 * time.Millisecond) // both pods have reloaded since
	for name, g := range map[string]*harness.Gateway{"A": a, "B": b} {
		require.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/v1/tenants/lostco", "").Status, "pod %s", name)
		require.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/v1/rules/lostco/default", "").Status, "pod %s", name)
	}
	// The counters went with Redis' data and the window they counted in
	// has passed (its permits, leases included, counted no longer): the
	// budget is whole again, and still enforced by both pods together.
	time.Sleep(time.Until(counted.Add(4 * time.Second)))
	assert.Equal(t, 3, harness.Passed(t, []*harness.Gateway{a, b}, 6, "lostco-key"), "the rule holds after")
	// A pod started now reads them from Redis.
	c := harness.Start(t, cfg)
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", c.Admin+"/v1/rules/lostco/default", "").Status)
}
