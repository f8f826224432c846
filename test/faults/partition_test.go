package faults

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/internal/spans"
)

// partitionLimit is the rule of the partition tests' tenant, per second.
const partitionLimit = 200

// partitionConfig is a gateway's configuration on the Redis at addr, with
// tenant hot limited to partitionLimit per second.
func partitionConfig(upstreamURL, addr string) string {
	return harness.Config(upstreamURL, append(faultSections(fmt.Sprintf("{addrs: [%q]}", addr), "{ip: 0, tenant: 0}"),
		harness.WithSection("rules", fmt.Sprintf("  - {tenant: hot, resource: default, algorithm: sliding_window, limit: %d, window: 1s}\n"+
			"  - {tenant: gold, resource: default, algorithm: sliding_window, limit: %d, window: 1s}\n", partitionLimit, partitionLimit)))...)
}

// TestFaultOnePodCutOff: one of three pods loses its connection to Redis
// for 8 s while the other two still reach it. Tenant hot is offered three
// times its limit round robin: across the pods no second holds more than the
// limit + 2% (the others keep the cut-off pod's share free once its
// heartbeats stop, and it grants that share only then); tenant gold, offered
// 30% of its limit, is never refused.
func TestFaultOnePodCutOff(t *testing.T) {
	gws, worst, gold := onePodFault(t, "cut off", func(l *harness.Link) { l.Cut() }, func(l *harness.Link) { l.Restore() })
	require.Positive(t, harness.Scrape(t, gws[2].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local"), "the cut-off pod decided alone")
	assert.Positive(t, harness.Scrape(t, gws[0].Admin, "sentinel_limit_held_share_calls_total"), "the others held its share")
	assert.LessOrEqual(t, worst, partitionLimit+partitionLimit*2/100, "busiest second of hot's approvals across the pods")
	assert.Zero(t, gold[http.StatusTooManyRequests], "gold, under its limit, refused")
}

// TestFaultOnePodSlowed: one of three pods reaches Redis 80 ms a round trip
// for 8 s, past its 50 ms store deadline, while its heartbeats (whose
// deadline is the exchange interval) still arrive: its store calls time
// out and its breaker opens alone, but the others still count it live and
// hold nothing for it, so it grants a contested key no more than the store's
// last answer left it. No second holds more than the limit + 2%.
func TestFaultOnePodSlowed(t *testing.T) {
	gws, worst, gold := onePodFault(t, "slowed", func(l *harness.Link) { l.Slow(40 * time.Millisecond) }, func(l *harness.Link) { l.Slow(0) })
	require.Positive(t, harness.Scrape(t, gws[2].Admin, "sentinel_limit_fallback_decisions_total", "policy", "local"), "the slowed pod decided alone")
	assert.LessOrEqual(t, worst, partitionLimit+partitionLimit*2/100, "busiest second of hot's approvals across the pods")
	assert.Zero(t, gold[http.StatusTooManyRequests], "gold, under its limit, refused")
}

// onePodFault runs tenant hot at three times its limit and gold at 30% of
// it, round robin over three pods of which the third reaches Redis through
// a link, on which fault acts for 8 s before heal. It returns the pods,
// hot's busiest second and gold's answers.
func onePodFault(t *testing.T, name string, fault, heal func(*harness.Link)) ([]*harness.Gateway, int, map[int]int) {
	t.Helper()
	srv := redistest.Start(t)
	link := harness.Listen(t, srv.Addr)
	up := harness.StartUpstream(t)
	var approved admissions
	o := harness.Options{OnDecision: approved.record}
	gws := []*harness.Gateway{
		harness.StartWith(t, partitionConfig(up.URL, srv.Addr), o),
		harness.StartWith(t, partitionConfig(up.URL, srv.Addr), o),
		harness.StartWith(t, partitionConfig(up.URL, link.Addr()), o),
	}
	harness.Eventually(t, 5*time.Second, "three live pods", func() bool {
		return gws[0].LivePods(t) == 3 && gws[1].LivePods(t) == 3 && gws[2].LivePods(t) == 3
	})
	var hot, gold codeTally
	approved.watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	offer(gws, "hot-key", 3*partitionLimit, 48, &hot, stop, &wg)
	offer(gws, "gold-key", partitionLimit*30/100, 2, &gold, stop, &wg)
	time.Sleep(2 * time.Second)
	fault(link)
	cut := time.Now()
	time.Sleep(8 * time.Second)
	heal(link)
	restored := time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	worst, from, _ := spans.Busiest(approved.of("hot", time.Time{}, time.Time{}), time.Second)
	during, _, _ := spans.Busiest(approved.of("hot", cut, restored), time.Second)
	t.Logf("faults: one pod %s %v: hot (limit %d/s, offered %d/s over 3 pods): busiest second %d (from %v after the cut), "+
		"within the cut %d, answers %v; gold (offered %d/s): answers %v; pods seen by the others %d, %d",
		name, restored.Sub(cut).Round(time.Millisecond), partitionLimit, 3*partitionLimit, worst, from.Sub(cut).Round(time.Millisecond),
		during, hot.get(), partitionLimit*30/100, gold.get(), gws[0].LivePods(t), gws[1].LivePods(t))
	if n := len(gold.refusedSince(cut)); n > 0 {
		t.Logf("gold's 429s after the cut (restored at %v): %v", restored.Sub(cut).Round(10*time.Millisecond), gold.refusedSince(cut)[:min(n, 40)])
	}
	assert.Equal(t, 0, others(gold.get()), "gold answers other than 200")
	assert.Equal(t, 0, others(hot.get()), "hot answers other than 200 and 429")
	return gws, worst, gold.get()
}
