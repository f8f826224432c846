package faults

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/internal/spans"
)

// reloadLimit is the rule of the reload test's tenant, per second, and
// reloadOver the busiest second it may see: the limit + 2%.
const (
	reloadLimit = 200
	reloadOver  = reloadLimit + reloadLimit*2/100
)

// TestFaultReloadDuringOutage: Redis is stopped for 7 s and, 3 s into the
// outage, every pod reloads a configuration with a changed limits key. The
// reloaded limiters go on from what the old ones knew (the local share used,
// the permits let through alone and not yet reported), so no second holds
// more than the limit + 2% across the pods: not the second after the reload,
// not the one after Redis is back.
func TestFaultReloadDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := func(maxKeys int) string {
		return harness.Config(up.URL, append(faultSections(fmt.Sprintf("{addrs: [%q]}", srv.Addr), fmt.Sprintf("{ip: 0, tenant: 0, max_keys: %d}", maxKeys)),
			harness.WithSection("rules", fmt.Sprintf("  - {tenant: hot, resource: default, algorithm: sliding_window, limit: %d, window: 1s}\n", reloadLimit)))...)
	}
	var approved admissions
	gws := threePods(t, cfg(100000), &approved)

	var hot codeTally
	approved.watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	offer(gws, "hot-key", 3*reloadLimit, 9, &hot, stop, &wg)
	time.Sleep(2 * time.Second)
	srv.Stop()
	stopped := time.Now()
	time.Sleep(3 * time.Second)
	for _, g := range gws {
		require.NoError(t, os.WriteFile(g.Path, []byte(cfg(100001)), 0o600))
		applied, _, err := g.Reload()
		require.NoError(t, err)
		require.Equal(t, []string{"limits.max_keys"}, applied)
	}
	reloaded := time.Now()
	time.Sleep(time.Until(stopped.Add(7 * time.Second)))
	srv.Restart()
	restarted := time.Now()
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()

	all := approved.of("hot", time.Time{}, time.Time{})
	worst, from, touching := spans.Busiest(all, time.Second)
	afterReload, _, _ := spans.Busiest(approved.of("hot", reloaded, reloaded.Add(time.Second)), time.Second)
	afterRestart, _, _ := spans.Busiest(approved.of("hot", restarted.Add(-time.Second), restarted.Add(time.Second)), time.Second)
	t.Logf("faults: reload %v into a %v outage: hot (limit %d/s, offered %d/s over 3 pods): busiest second %d (from %v after the stop; touching %d), "+
		"the second after the reload %d, across the restart %d; answers %v",
		reloaded.Sub(stopped).Round(time.Millisecond), restarted.Sub(stopped).Round(time.Millisecond), reloadLimit, 3*reloadLimit,
		worst, from.Sub(stopped).Round(time.Millisecond), touching, afterReload, afterRestart, hot.get())
	require.Positive(t, hot.get()[http.StatusTooManyRequests], "hot was offered more than its limit")
	assert.LessOrEqual(t, worst, reloadOver, "busiest second of hot's approvals across the pods")
	assert.Equal(t, 0, others(hot.get()), "hot answers other than 200 and 429")
}
