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
)

// underLimitRun offers tenant gold (limit 2×faultLimit per second) frac
// percent of its limit round robin over three pods on srv's addresses
// addrs (one per pod) and hot three times its limit, runs fault after 1.5 s,
// then 2 s more, and returns gold's answers and when its 429s came.
func underLimitRun(t *testing.T, addrs []string, frac int, fault func()) (map[int]int, []time.Duration) {
	t.Helper()
	up := harness.StartUpstream(t)
	var approved admissions
	o := harness.Options{OnDecision: approved.record}
	gws := make([]*harness.Gateway, len(addrs))
	for i, a := range addrs {
		gws[i] = harness.StartWith(t, faultConfig(up.URL, fmt.Sprintf("{addrs: [%q]}", a), ", store_timeout: 50ms"), o)
	}
	harness.Eventually(t, 5*time.Second, "three live pods", func() bool {
		return gws[0].LivePods(t) == 3 && gws[1].LivePods(t) == 3 && gws[2].LivePods(t) == 3
	})
	var hot, gold codeTally
	stop := make(chan struct{})
	var wg sync.WaitGroup
	offer(gws, "hot-key", 3*faultLimit, 8, &hot, stop, &wg)
	offer(gws, "gold-key", 2*faultLimit*frac/100, 4, &gold, stop, &wg)
	time.Sleep(1500 * time.Millisecond)
	began := time.Now()
	fault()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	require.Equal(t, 0, others(hot.get()), "hot answers other than 200 and 429")
	return gold.get(), gold.refusedSince(began)
}

// TestFaultUnderLimitThroughAPause: tenant gold at 50% of its limit is
// never refused while Redis is paused for 5 s (the pods' calls time out,
// then their breakers open and their probes fail), nor when it resumes.
func TestFaultUnderLimitThroughAPause(t *testing.T) {
	srv := redistest.Start(t)
	codes, refused := underLimitRun(t, []string{srv.Addr, srv.Addr, srv.Addr}, 50, func() {
		srv.Pause()
		time.Sleep(5 * time.Second)
		srv.Resume()
	})
	t.Logf("faults: redis paused 5s: gold at 50%% of its limit: answers %v, 429s at %v after the pause began", codes, refused[:min(len(refused), 20)])
	assert.Zero(t, codes[http.StatusTooManyRequests], "gold, under its limit, refused")
	assert.Equal(t, 0, others(codes), "gold answers other than 200")
}

// TestFaultUnderLimitThroughSlowCalls: every store call of every pod slowed
// to about its 50 ms deadline for 4 s (a host that stalls: some calls time
// out, the breakers mostly stay closed): tenant gold at 70% of its limit is
// never refused.
func TestFaultUnderLimitThroughSlowCalls(t *testing.T) {
	srv := redistest.Start(t)
	links := []*harness.Link{harness.Listen(t, srv.Addr), harness.Listen(t, srv.Addr), harness.Listen(t, srv.Addr)}
	codes, refused := underLimitRun(t, []string{links[0].Addr(), links[1].Addr(), links[2].Addr()}, 70, func() {
		for _, l := range links {
			l.Slow(24 * time.Millisecond) // each way: about 50 ms a call
		}
		time.Sleep(4 * time.Second)
		for _, l := range links {
			l.Slow(0)
		}
	})
	t.Logf("faults: store calls slowed to their deadline: gold at 70%% of its limit: answers %v, 429s at %v after the slowdown began", codes, refused[:min(len(refused), 20)])
	assert.Zero(t, codes[http.StatusTooManyRequests], "gold, under its limit, refused")
	assert.Equal(t, 0, others(codes), "gold answers other than 200")
}
