package faults

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/internal/spans"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// The fault suite's store faults: Redis paused, slowed, gone at start, and a
// cluster master lost, under load through three gateways. Each test records
// when the gateways approved each request (admissions) and what the clients
// got, and asserts the promises: no window of the limit's length holds more
// approvals than the limit + 2% across the pods, and a client under its limit
// is never refused.

// faultLimit is the rule of the over-limit tenant, per second.
const faultLimit = 100

// overLimit is the busiest window a fault may leave: the limit + 2%.
const overLimit = faultLimit + faultLimit*2/100

// faultConfig is three gateways' configuration: tenant hot is limited to
// faultLimit per second and offered more; tenant gold has a limit of
// 2×faultLimit per second and is offered less than half of it.
func faultConfig(upstreamURL, redis, limits string) string {
	return harness.Config(upstreamURL, append(faultSections(redis, "{ip: 0, tenant: 0"+limits+"}"),
		harness.WithSection("rules", fmt.Sprintf("  - {tenant: hot, resource: default, algorithm: sliding_window, limit: %d, window: 1s}\n"+
			"  - {tenant: gold, resource: default, algorithm: sliding_window, limit: %d, window: 1s}\n", faultLimit, 2*faultLimit)))...)
}

// faultSections are the sections every store fault's gateways share: the
// store, the limits section, and a cluster view that sees the other pods
// within a second (their heartbeats make the local share).
func faultSections(redis, limits string) []harness.ConfigOption {
	return []harness.ConfigOption{
		harness.WithSection("adaptive", "{enabled: false, cluster_interval: 200ms, pressure_ttl: 1s}"),
		harness.WithSection("redis", redis),
		harness.WithSection("limits", limits),
	}
}

// codeTally counts the answers of one client by status.
type codeTally struct {
	mu      sync.Mutex
	codes   map[int]int
	refused []time.Time // when each 429 came
	sent    []time.Time // when each 200 was sent
}

func (t *codeTally) add(code int) { t.addSent(code, time.Time{}) }

// addSent counts an answer to a request sent at sent (zero: not recorded).
func (t *codeTally) addSent(code int, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.codes == nil {
		t.codes = map[int]int{}
	}
	t.codes[code]++
	switch {
	case code == http.StatusTooManyRequests:
		t.refused = append(t.refused, time.Now())
	case code == http.StatusOK && !sent.IsZero():
		t.sent = append(t.sent, sent)
	}
}

// sentOK returns when the requests answered 200 were sent.
func (t *codeTally) sentOK() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.sent)
}

// refusedSince returns when the 429s came, as durations since start.
func (t *codeTally) refusedSince(start time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Duration, len(t.refused))
	for i, at := range t.refused {
		out[i] = at.Sub(start).Round(10 * time.Millisecond)
	}
	return out
}

func (t *codeTally) get() map[int]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.codes)
}

// offer sends key's requests at perSecond, round robin over gws, from
// workers paced by one ticker each, until stop is closed.
func offer(gws []*harness.Gateway, key string, perSecond, workers int, into *codeTally, stop <-chan struct{}, wg *sync.WaitGroup) {
	offerWith(gws, perSecond, workers, into, stop, wg, "X-API-Key", key)
}

// busiest returns the most arrivals in any interval of length window, and
// when the first such interval began.
func busiest(at []time.Time, window time.Duration) (int, time.Time) {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	worst, from := 0, time.Time{}
	for i := range at {
		j, _ := slices.BinarySearchFunc(at, at[i].Add(window), func(a, b time.Time) int { return a.Compare(b) })
		if j-i > worst {
			worst, from = j-i, at[i]
		}
	}
	return worst, from
}

// admissions records, per tenant, when the gateways approved each request:
// the span from entering the limiter to its answer, inside which the
// decision was made. The promises of the fault suite are about decisions.
// The arrival times at the upstream are not: under -race on a loaded machine
// the forwarding delay varies by tens of milliseconds, so approvals made over
// a little more than a second can arrive within one and be counted as an
// over-admission that never happened (a full `go test -race ./...` run saw
// 107 arrivals in a second against a limit of 102).
type admissions struct {
	on    atomic.Bool
	mu    sync.Mutex
	spans map[string][]span
}

// span is when one decision was made (spans.Span).
type span = spans.Span

// watch starts recording the approvals of the gateways whose decisions
// go to record.
func (a *admissions) watch() { a.on.Store(true) }

// record is the gateways' OnDecision: it keeps the approvals made once
// watch was called.
func (a *admissions) record(req *limit.Request, d limit.Decision, from, to time.Time) {
	if !d.Allowed || !a.on.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.spans == nil {
		a.spans = map[string][]span{}
	}
	a.spans[req.Tenant] = append(a.spans[req.Tenant], span{From: from, To: to})
}

// of returns tenant's approvals whose span began in [from, to) (zero times:
// unbounded).
func (a *admissions) of(tenant string, from, to time.Time) []span {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []span
	for _, s := range a.spans[tenant] {
		if (from.IsZero() || !s.From.Before(from)) && (to.IsZero() || s.From.Before(to)) {
			out = append(out, s)
		}
	}
	return out
}

// threePods starts three gateways of cfg and waits until each counts three
// live pods (the local share of a failure is a third of each limit).
func threePods(t *testing.T, cfg string, approved *admissions) []*harness.Gateway {
	t.Helper()
	o := harness.Options{OnDecision: approved.record}
	gws := []*harness.Gateway{harness.StartWith(t, cfg, o), harness.StartWith(t, cfg, o), harness.StartWith(t, cfg, o)}
	harness.Eventually(t, 5*time.Second, "three live pods", func() bool {
		for _, g := range gws {
			if g.LivePods(t) != 3 {
				return false
			}
		}
		return true
	})
	return gws
}

// TestFaultRedisPausedAndResumed: Redis freezes for 3 s in the middle of the
// load and comes back. Across the three pods no second holds more than the
// limit + 2% of tenant hot (offered three times its limit), and tenant gold,
// offered under half of its limit, is never refused: not during the pause,
// not when Redis answers again.
func TestFaultRedisPausedAndResumed(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	var approved admissions
	gws := threePods(t, faultConfig(up.URL, fmt.Sprintf("{addrs: [%q]}", srv.Addr), ""), &approved)

	var hot, gold codeTally
	approved.watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	offer(gws, "hot-key", 3*faultLimit, 6, &hot, stop, &wg)
	offer(gws, "gold-key", 2*faultLimit*45/100, 3, &gold, stop, &wg)
	fallbackBefore := harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local")
	time.Sleep(2 * time.Second)
	srv.Pause()
	paused := time.Now()
	time.Sleep(3 * time.Second)
	srv.Resume()
	resumed := time.Now()
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()

	fallback := harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local") - fallbackBefore
	pods := []int{gws[0].LivePods(t), gws[1].LivePods(t), gws[2].LivePods(t)}
	worst, from, touching := spans.Busiest(approved.of("hot", time.Time{}, time.Time{}), time.Second)
	during, _, _ := spans.Busiest(approved.of("hot", paused, resumed), time.Second)
	after, _, _ := spans.Busiest(approved.of("hot", resumed.Add(-time.Second), resumed.Add(time.Second)), time.Second)
	byArrival, _ := busiest(up.Arrivals("hot-key"), time.Second)
	bySend, _ := busiest(hot.sentOK(), time.Second)
	t.Logf("faults: hot's busiest second within the pause %d, across the resume %d; counting decisions that touch a second %d, "+
		"by the arrivals at the upstream %d, by the clients' send times %d", during, after, touching, byArrival, bySend)
	t.Logf("faults: redis paused %v: hot (limit %d/s, offered %d/s over 3 pods): busiest second %d (from %v after the pause began), answers %v; "+
		"gold (limit %d/s, offered %d/s): answers %v; local fallback decisions %.0f; live pods after %v",
		resumed.Sub(paused).Round(time.Millisecond), faultLimit, 3*faultLimit, worst, from.Sub(paused).Round(time.Millisecond), hot.get(),
		2*faultLimit, 2*faultLimit*45/100, gold.get(), fallback, pods)
	if n := len(gold.refusedSince(paused)); n > 0 {
		t.Logf("gold's 429s after the pause began (resumed at %v): %v", resumed.Sub(paused).Round(10*time.Millisecond), gold.refusedSince(paused)[:min(n, 40)])
	}
	require.Positive(t, fallback, "the pause was decided by the local share")
	assert.Equal(t, hot.get()[http.StatusOK], len(approved.of("hot", time.Time{}, time.Time{})), "hot's 200s seen as approvals")
	assert.LessOrEqual(t, worst, overLimit, "busiest second of hot's approvals across the pods")
	assert.Zero(t, gold.get()[http.StatusTooManyRequests], "gold, under its limit, refused")
	assert.Equal(t, 0, others(gold.get()), "gold answers other than 200")
	assert.Equal(t, 0, others(hot.get()), "hot answers other than 200 and 429")
	assert.Equal(t, []int{3, 3, 3}, pods, "the pods still count each other")
}

// others counts the answers that are neither 200 nor 429.
func others(codes map[int]int) int {
	n := 0
	for c, k := range codes {
		if c != http.StatusOK && c != http.StatusTooManyRequests {
			n += k
		}
	}
	return n
}

// clusterConfig is three gateways' configuration on a Redis Cluster: six
// tenants t0..t5 with a rule of faultLimit per second each, so that some
// land on every master.
func clusterConfig(upstreamURL string, addrs []string) string {
	var tenants, rules strings.Builder
	for i := range 6 {
		fmt.Fprintf(&tenants, "  - {id: t%d, plan: FREE, api_keys: [t%d-key]}\n", i, i)
		fmt.Fprintf(&rules, "  - {tenant: t%d, resource: default, algorithm: sliding_window, limit: %d, window: 1s}\n", i, faultLimit)
	}
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	redis := fmt.Sprintf("{addrs: [%s], cluster: true}", strings.Join(quoted, ", "))
	return harness.Config(upstreamURL, append(faultSections(redis, "{ip: 0, tenant: 0}"),
		harness.WithSection("tenants", tenants.String()), harness.WithSection("rules", rules.String()))...)
}

// limitOf sends one request and returns its status and, for a 429, the
// limit it was refused under (X-RateLimit-Limit).
func limitOf(url, key string) (int, string) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, ""
	}
	req.Header.Set("X-API-Key", key)
	resp, err := harness.Client.Do(req)
	if err != nil {
		return 0, ""
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-RateLimit-Limit")
}

// TestFaultClusterMasterKilled: one master of a 3-node Redis Cluster (no
// replicas) is killed under load. The tenant whose counter lived on it is
// decided by the local shares and stays within its limit + 2%; the tenant
// whose counter lives on a master that is still up keeps the store's exact
// decisions (every refusal under its whole limit, not a share of it, except
// for a call to its own master that timed out) and its node's breaker stays
// closed.
func TestFaultClusterMasterKilled(t *testing.T) {
	cl := redistest.StartCluster(t)
	up := harness.StartUpstream(t)
	var approved admissions
	gws := threePods(t, clusterConfig(up.URL, cl.Addrs), &approved)

	// Which master holds each tenant's counter (Nodes[i] serves the i-th
	// third of the slots).
	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: cl.Addrs, Cluster: true})
	require.NoError(t, err)
	defer rc.Close()
	nodeOf := func(tenant string) int {
		slot, err := rc.Do(context.Background(), rc.B().ClusterKeyslot().Key("{rule:"+tenant+":default}").Build()).AsInt64()
		require.NoError(t, err)
		return int(slot) * 3 / 16384
	}
	dead, live := "", ""
	deadNode := nodeOf("t0")
	dead = "t0"
	for i := 1; i < 6 && live == ""; i++ {
		if name := fmt.Sprintf("t%d", i); nodeOf(name) != deadNode {
			live = name
		}
	}
	require.NotEmpty(t, live, "a tenant on another master")

	var deadTally, liveTally codeTally
	approved.watch()
	var refusedUnder sync.Map // X-RateLimit-Limit of the live tenant's 429s after the kill
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	offer(gws, dead+"-key", 3*faultLimit, 6, &deadTally, stop, &wg)
	period := 6 * time.Second / (3 * faultLimit)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; ; i++ {
				code, lim := limitOf(gws[(w+i)%3].URL+"/c", live+"-key")
				liveTally.add(code)
				if code == http.StatusTooManyRequests && killed.Load() {
					v, _ := refusedUnder.LoadOrStore(lim, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
	}
	calls := func(result string) float64 {
		return harness.Scrape(t, gws[0].Admin, "sentinel_limit_store_calls_total", "result", result)
	}
	timeoutsBefore, errorsBefore := calls("timeout"), calls("error")
	liveNode := nodeOf(live)
	failedOnLive := func() float64 {
		return harness.Scrape(t, gws[0].Admin, "sentinel_limit_node_store_failures_total", "node", cl.Nodes[liveNode].Addr)
	}
	time.Sleep(1500 * time.Millisecond)
	failedBefore := failedOnLive()
	cl.Nodes[deadNode].Stop()
	killedAt := time.Now()
	killed.Store(true)
	time.Sleep(3500 * time.Millisecond)
	close(stop)
	wg.Wait()
	// Store calls for the live tenant's key that failed (every gateway of
	// the test runs in this process, so the series counts all three pods).
	failedLive := int64(failedOnLive() - failedBefore)

	timeouts, errs := calls("timeout")-timeoutsBefore, calls("error")-errorsBefore
	deadWorst, deadAt, deadTouching := spans.Busiest(approved.of(dead, time.Time{}, time.Time{}), time.Second)
	liveWorst, _, liveTouching := spans.Busiest(approved.of(live, time.Time{}, time.Time{}), time.Second)
	liveAfter := len(approved.of(live, killedAt.Add(500*time.Millisecond), killedAt.Add(3500*time.Millisecond)))
	deadByArrival, _ := busiest(up.Arrivals(dead+"-key"), time.Second)
	liveByArrival, _ := busiest(up.Arrivals(live+"-key"), time.Second)
	t.Logf("faults: busiest second counting decisions that touch it: %s %d, %s %d; by the arrivals at the upstream: %s %d, %s %d; "+
		"%s's busiest second from %v after the kill; store calls timed out %.0f, failed %.0f",
		dead, deadTouching, live, liveTouching, dead, deadByArrival, live, liveByArrival,
		dead, deadAt.Sub(killedAt).Round(time.Millisecond), timeouts, errs)
	under := map[string]int64{}
	refusedUnder.Range(func(k, v any) bool { under[k.(string)] = v.(*atomic.Int64).Load(); return true })
	states := map[string]float64{}
	for i, n := range cl.Nodes {
		states[fmt.Sprintf("node%d", i)] = harness.Scrape(t, gws[0].Admin, "sentinel_limit_node_breaker_state", "node", n.Addr)
	}
	t.Logf("faults: cluster master %d killed: %s (counter on it; limit %d/s, offered %d/s): busiest second %d, answers %v; "+
		"%s (counter on a live master): busiest second %d, %d approved in the 3 s from 0.5 s after the kill, answers %v, 429s after the kill by X-RateLimit-Limit %v, "+
		"its master's store calls failed or timed out after the kill %d; node breakers %v",
		deadNode, dead, faultLimit, 3*faultLimit, deadWorst, deadTally.get(), live, liveWorst, liveAfter, liveTally.get(), under, failedLive, states)
	assert.Equal(t, deadTally.get()[http.StatusOK], len(approved.of(dead, time.Time{}, time.Time{})), "200s seen as approvals")
	assert.Equal(t, liveTally.get()[http.StatusOK], len(approved.of(live, time.Time{}, time.Time{})), "200s seen as approvals")
	assert.LessOrEqual(t, deadWorst, overLimit, "busiest second of the tenant on the killed master")
	assert.LessOrEqual(t, liveWorst, faultLimit, "the tenant on a live master: exact")
	// Its limit, not a share of it: a third of the limit per pod would
	// come to the limit too under round-robin, so the share is caught by
	// the refusals' X-RateLimit-Limit below; this bound catches a tenant
	// decided by the fallback or refused outright. Below the limit by at
	// most a fifth: leases that expire unused while a loaded machine delays
	// their pod count for their window (the protocol's under-use), 2 to 10%
	// in runs on a 2-core machine under -race.
	assert.GreaterOrEqual(t, liveAfter, 3*faultLimit*80/100, "the tenant on a live master got its limit (not a share of it)")
	// A refusal under the local share (X-RateLimit-Limit 33) is the
	// fallback's, which decides only a request whose own store call failed
	// (its node's breaker stays closed, asserted below). On a loaded machine
	// under -race a call to a live master sometimes outlasts store_timeout
	// (50 ms) or reaches Redis after its deadline: that is the call's own
	// timeout, not the dead master's (the client keeps one connection per
	// master; a run with every failure logged showed only timeouts and late
	// runs on the live master, connection errors only on the dead one). So
	// the promise is: no refusal of the live tenant by the fallback beyond
	// the failed calls to its own master, and none at all when those calls
	// all answered in time.
	fallbackRefusals := int64(0)
	for lim, n := range under {
		if lim != strconv.Itoa(faultLimit) {
			fallbackRefusals += n
		}
	}
	assert.LessOrEqual(t, fallbackRefusals, failedLive,
		"refusals of the tenant on a live master by the fallback (%v) beyond the failed calls to its master", under)
	assert.Positive(t, under[strconv.Itoa(faultLimit)], "the tenant on a live master was refused at its limit")
	for i := range cl.Nodes {
		want := 0.0
		if i == deadNode {
			want = 2 // open (1 while a probe is in flight)
			assert.Positive(t, states[fmt.Sprintf("node%d", i)], "the killed master's breaker")
			continue
		}
		assert.Equal(t, want, states[fmt.Sprintf("node%d", i)], "node %d's breaker", i)
	}
}

// TestFaultStoreSlowed: store calls that miss their deadline under load,
// whether the deadline is tiny (2 ms on a loaded machine under -race: many
// calls time out, some pods' breakers open while others' stay closed) or
// Redis stalls for 300 ms every second. Across the three pods no second
// holds more than tenant hot's limit + 2%, and tenant gold, offered under
// half of its limit, is never refused.
//
// The tiny deadline comes with a reload once the load has run for a
// second and a half: by then each pod has the store's answers for both
// keys, and the store has refused hot on each. Set from the start, it
// timed out every pod's first calls together (the first calls of a process
// run slower), and a pod whose calls for hot kept failing knew nothing of
// the key: it let its share through alone while the others took the whole
// limit (133 in a second for 100 in 1 run of 56), the bound
// docs/leases.md gives a key the store had not refused on a pod when its
// calls began to fail (limit.TestUnrefusedKeyTakesItsShareAlone).
func TestFaultStoreSlowed(t *testing.T) {
	for _, tc := range []struct {
		name, limits string
		stall        bool
	}{
		{"store_timeout 2ms", ", store_timeout: 2ms, breaker_failures: 2", false},
		{"redis stalls 300ms a second", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			up := harness.StartUpstream(t)
			var approved admissions
			redis := fmt.Sprintf("{addrs: [%q]}", srv.Addr)
			gws := threePods(t, faultConfig(up.URL, redis, ""), &approved)
			var hot, gold codeTally
			approved.watch()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			offer(gws, "hot-key", 3*faultLimit, 6, &hot, stop, &wg)
			offer(gws, "gold-key", 2*faultLimit*45/100, 3, &gold, stop, &wg)
			if tc.limits != "" {
				time.Sleep(1500 * time.Millisecond)
				for _, g := range gws {
					require.NoError(t, os.WriteFile(g.Path, []byte(faultConfig(up.URL, redis, tc.limits)), 0o600))
					applied, _, err := g.Reload()
					require.NoError(t, err)
					require.ElementsMatch(t, []string{"limits.store_timeout", "limits.breaker_failures"}, applied)
				}
			}
			timeouts := harness.Scrape(t, gws[0].Admin, "sentinel_limit_store_calls_total", "result", "timeout")
			fallback := harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local")
			for range 6 {
				if tc.stall {
					srv.Pause()
					time.Sleep(300 * time.Millisecond)
					srv.Resume()
					time.Sleep(700 * time.Millisecond)
				} else {
					time.Sleep(time.Second)
				}
			}
			close(stop)
			wg.Wait()
			timeouts = harness.Scrape(t, gws[0].Admin, "sentinel_limit_store_calls_total", "result", "timeout") - timeouts
			fallback = harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local") - fallback
			worst, _, touching := spans.Busiest(approved.of("hot", time.Time{}, time.Time{}), time.Second)
			byArrival, _ := busiest(up.Arrivals("hot-key"), time.Second)
			t.Logf("faults: hot's busiest second counting decisions that touch it %d, by the arrivals at the upstream %d", touching, byArrival)
			t.Logf("faults: store slowed (%s): hot (limit %d/s, offered %d/s over 3 pods): busiest second %d, answers %v; "+
				"gold (limit %d/s, offered %d/s): answers %v; store calls timed out %.0f, local fallback decisions %.0f",
				tc.name, faultLimit, 3*faultLimit, worst, hot.get(), 2*faultLimit, 2*faultLimit*45/100, gold.get(), timeouts, fallback)
			require.Positive(t, timeouts+fallback, "no store call was slowed")
			assert.Equal(t, hot.get()[http.StatusOK], len(approved.of("hot", time.Time{}, time.Time{})), "hot's 200s seen as approvals")
			assert.LessOrEqual(t, worst, overLimit, "busiest second of hot's approvals across the pods")
			assert.Zero(t, gold.get()[http.StatusTooManyRequests], "gold, under its limit, refused")
			assert.Equal(t, 0, others(gold.get())+others(hot.get()), "answers other than 200 and 429")
		})
	}
}

// TestFaultKeyFloodServesNewUsers: gateways with limits.max_keys 1,000 and
// a policy of 5 per hour per X-User-Id: one on the in-memory store, one on
// Redis, three on one Redis. 50 users use up their limit (each through one
// gateway), then 7,000 new IDs (6,000 past max_keys) pass once each, spread
// over the gateways. Afterwards the 50 are all still refused and 50 users
// never seen are all served: a full table charges no new key to a budget
// that other keys spent. On Redis the same holds while Redis is paused
// (store timeouts, then the open breaker: each pod's local share decides,
// and its table is as full as the flood made it).
func TestFaultKeyFloodServesNewUsers(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		gws := startFloodGateways(t, "", 1)
		keyFlood(t, gws)
		assertFloodAnswers(t, gws, "after")
		assert.Positive(t, harness.Scrape(t, gws[0].Admin, "sentinel_limit_memory_evictions_total", "table", "store"))
	})
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("redis-%dpods", n), func(t *testing.T) {
			srv := redistest.Start(t)
			gws := startFloodGateways(t, fmt.Sprintf("{addrs: [%q]}", srv.Addr), n)
			keyFlood(t, gws)
			assertFloodAnswers(t, gws, "after")
			srv.Pause()
			defer srv.Resume()
			assertFloodAnswers(t, gws, "paused")
			assert.Positive(t, harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local"))
			assert.Positive(t, harness.Scrape(t, gws[0].Admin, "sentinel_limit_memory_evictions_total", "table", "local_share"))
		})
	}
}

// floodLimit is the per-user limit of the key flood, per hour.
const floodLimit = 5

// startFloodGateways starts n gateways (on redis, or each on its own
// in-memory store when redis is empty) that see each other, and uses up
// the limit of 50 users, user i through gateway i mod n.
func startFloodGateways(t *testing.T, redis string, n int) []*harness.Gateway {
	up := harness.StartUpstream(t)
	opts := faultSections(redis, "{ip: 0, tenant: 0, max_keys: 1000, store_timeout: 100ms, breaker_cooldown: 1m, on_store_failure: local}")
	if redis == "" {
		opts = opts[:1]
		opts = append(opts, harness.WithSection("limits", "{ip: 0, tenant: 0, max_keys: 1000}"))
	}
	opts = append(opts, harness.WithExtra(fmt.Sprintf("policies:\n  - {name: per-user, key: [header:X-User-Id], limits: [{limit: %d, window: 1h}]}\n", floodLimit)))
	var gws []*harness.Gateway
	for range n {
		gws = append(gws, harness.Start(t, harness.Config(up.URL, opts...)))
	}
	harness.Eventually(t, 5*time.Second, "the pods see each other", func() bool { return gws[0].LivePods(t) == n })
	for i := range 50 {
		g := gws[i%n]
		for range floodLimit {
			require.Equal(t, 200, harness.Status("GET", g.URL+"/x", "X-User-Id", "held-"+strconv.Itoa(i)))
		}
		require.Equal(t, 429, harness.Status("GET", g.URL+"/x", "X-User-Id", "held-"+strconv.Itoa(i)))
	}
	return gws
}

// keyFlood sends 7,000 new IDs once each, round robin over the gateways;
// every one is under its limit.
func keyFlood(t *testing.T, gws []*harness.Gateway) {
	const ids, workers = 7000, 4
	var refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < ids; i += workers {
				if harness.Status("GET", gws[i%len(gws)].URL+"/x", "X-User-Id", "flood-"+strconv.Itoa(i)) != 200 {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, refused.Load(), "new IDs of the flood refused under their limit")
}

// assertFloodAnswers: the 50 exhausted users are refused by the gateway
// they used, and 50 users never seen (named by phase) are served.
func assertFloodAnswers(t *testing.T, gws []*harness.Gateway, phase string) {
	time.Sleep(100 * time.Millisecond) // past the cached refusals: the requests ask again
	refused, served := 0, 0
	for i := range 50 {
		g := gws[i%len(gws)]
		if harness.Status("GET", g.URL+"/x", "X-User-Id", "held-"+strconv.Itoa(i)) == 429 {
			refused++
		}
		if harness.Status("GET", g.URL+"/x", "X-User-Id", phase+"-"+strconv.Itoa(i)) == 200 {
			served++
		}
	}
	keys := harness.Scrape(t, gws[0].Admin, "sentinel_limit_memory_keys")
	t.Logf("faults: key flood (%d pods, %s): %d of 50 exhausted users refused, %d of 50 new users served; %.0f keys in the in-memory tables of the process (max_keys 1000 each)",
		len(gws), phase, refused, served, keys)
	assert.Equal(t, 50, refused, "exhausted users served after the flood (%s)", phase)
	assert.Equal(t, 50, served, "new users refused after the flood (%s)", phase)
}

// TestFaultKeyFloodKeepsExhaustedCounters: a gateway on the in-memory store
// (limits.max_keys at its default; adaptive control off, so that the load
// of the tests before cannot shrink the limit) with an IP limit of 10 per
// hour. 200 clients use up their limit (one of them over HTTP), then 2,000,000
// distinct keys flood the same store. Every one of the 200 is still
// refused, the store holds no more than max_keys keys (the flood's keys,
// used once, are evicted for each other), and every key of the flood got
// its permit: none was charged to a budget that others spent.
//
// It stands last in the suite's last file: the gateway it floods keeps its
// heap of max_keys keys alive for seconds after it stops (the HTTP server's
// idle-worker cleaner holds the handler until its next tick), which slowed
// the cluster failover test after it below its figure.
func TestFaultKeyFloodKeepsExhaustedCounters(t *testing.T) {
	const limitPerHour, held, flood = 10, 200, 2_000_000
	up := harness.StartUpstream(t)
	const maxKeys = 100_000 // limits.max_keys' default
	mem := store.NewMemoryStore(store.MemoryOptions{MaxKeys: maxKeys})
	g := harness.StartWith(t, `
server: {admin_listen: "127.0.0.1:0", trusted_proxies: ["127.0.0.1/32"]}
limits: {ip: `+strconv.Itoa(limitPerHour)+`, window: 1h}
upstreams:
  api: {targets: ["`+up.URL+`"]}
routes:
  - {path_prefix: /, upstream: api}
adaptive: {enabled: false}
`, harness.Options{Store: mem})
	ctx := context.Background()

	for range limitPerHour {
		require.Equal(t, 200, harness.Status("GET", g.URL+"/x"))
	}
	require.Equal(t, 429, harness.Status("GET", g.URL+"/x"))
	ips := make([]string, held-1)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.1.%d.%d", i/250, i%250)
		for range limitPerHour {
			require.Equal(t, 200, harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ips[i]))
		}
		require.Equal(t, 429, harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ips[i]))
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	var granted atomic.Int64
	var wg sync.WaitGroup
	const workers = 2
	for w := range workers {
		wg.Go(func() {
			req := &store.LeaseRequest{
				Params: store.Params{Algorithm: store.SlidingWindow, Limit: limitPerHour, Window: time.Hour},
				Want:   1, LeaseTTL: 250 * time.Millisecond,
			}
			var buf, ip []byte
			n := int64(0)
			for i := w; i < flood; i += workers {
				ip = strconv.AppendInt(append(ip[:0], "flood-"...), int64(i), 10)
				req.Key = store.AppendKey(buf[:0], "", "ip", ip)
				buf = req.Key
				r, err := mem.Lease(ctx, req)
				if err != nil {
					panic(err)
				}
				n += r.Granted
			}
			granted.Add(n)
		})
	}
	wg.Wait()
	took := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	refused := 0
	if harness.Status("GET", g.URL+"/x") == 429 {
		refused++
	}
	for _, ip := range ips {
		if harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ip) == 429 {
			refused++
		}
	}
	evicted := harness.Scrape(t, g.Admin, "sentinel_limit_memory_evictions_total", "table", "store")
	keys := mem.Len()
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("faults: key flood: %d of %d exhausted clients still refused after %d distinct keys (%.1f s, %.0f keys/s); store holds %d keys (max_keys %d); flood granted %d; evictions %.0f; heap %+.1f MB (%.0f B per key held)",
		refused, held, flood, took.Seconds(), float64(flood)/took.Seconds(), keys, maxKeys, granted.Load(), evicted,
		float64(growth)/(1<<20), float64(growth)/float64(max(keys, 1)))
	assert.Equal(t, held, refused, "exhausted counters were forgotten under the flood")
	assert.LessOrEqual(t, keys, maxKeys)
	assert.Equal(t, int64(flood), granted.Load(), "keys of the flood refused under their limit")
	assert.Positive(t, evicted)
	assert.Less(t, growth, int64(maxKeys)*2048, "the store's memory is not bounded by max_keys")
}
