package e2e

import (
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
)

// TestQuickStart runs the root config.yaml (the README's quick start) in
// front of a real upstream: a request passes with rate-limit headers, and the
// demo tenant's sixth request in ten seconds is limited.
func TestQuickStart(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ReadFile(t, "config.yaml"), "SENTINEL_UPSTREAMS_API_TARGETS="+up.URL)

	a := harness.Do(t, "GET", g.URL+"/hello?x=1", "", "X-API-Key", "acme-live-1")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	assert.Equal(t, `{"path":"/hello"}`, string(a.Body))
	assert.NotEmpty(t, a.Header.Get("X-Request-Id"))
	assert.Equal(t, `"tenant";q=300;w=1, "ip";q=50;w=1`, a.Header.Get("RateLimit-Policy"), "as the README shows it")
	assert.Equal(t, `"ip";r=49;t=1`, a.Header.Get("RateLimit"))
	assert.NotEmpty(t, a.Header.Get("X-RateLimit-Remaining"))

	for i := range 5 {
		a = harness.Do(t, "GET", g.URL+"/hello", "", "X-API-Key", "demo-key-1")
		require.Equal(t, http.StatusOK, a.Status, "request %d: %s", i+1, a.Body)
	}
	a = harness.Do(t, "GET", g.URL+"/hello", "", "X-API-Key", "demo-key-1")
	require.Equal(t, http.StatusTooManyRequests, a.Status, "%s", a.Body)
	assert.Equal(t, `"rule";q=5;w=10, "tenant";q=100;w=1, "ip";q=50;w=1`, a.Header.Get("RateLimit-Policy"), "as the README shows it")
	require.NotEmpty(t, a.Header.Get("Retry-After"))
	assert.Equal(t, `"rule";r=0;t=`+a.Header.Get("Retry-After"), a.Header.Get("RateLimit"), "t is Retry-After's second")
	body := a.JSON(t)
	assert.Contains(t, body, "error")
	assert.Equal(t, "rule", body["scope"])
	assert.Equal(t, "10s", body["window"], "the window as configured")
	assert.EqualValues(t, 5, body["limit"])
	assert.Greater(t, body["retry_after_ms"], 0.0)
	assert.Equal(t, a.Header.Get("X-Request-Id"), body["request_id"])
	assert.Equal(t, 6, int(up.Hits()), "the limited request must not reach the upstream")
}

// TestMultiPodLimitHolds offers one tenant ten times its limit through three
// gateways that share one Redis, for several windows. The upstream counts what
// passed: no sliding window of the limit's length may hold more than the
// limit, and the pods together must approve at least 90% of it.
func TestMultiPodLimitHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-pod load test (runs in make test)")
	}
	const (
		limitPerWindow = 40
		window         = time.Second
		duration       = 8 * time.Second
		offeredPerSec  = 10 * limitPerWindow
		workers        = 12
	)
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf(`
redis: {addrs: [%q]}
limits: {tenant: %d, window: %v, ip: 0, store_timeout: 50ms}
`, srv.Addr, limitPerWindow, window))
	gws := []*harness.Gateway{harness.Start(t, cfg), harness.Start(t, cfg), harness.Start(t, cfg)}

	callsBefore := harness.Scrape(t, gws[0].Admin, "sentinel_limit_store_calls_total")
	var sent, ok, limited, other atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			period := time.Duration(workers) * time.Second / offeredPerSec
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; time.Since(start) < duration; i++ {
				g := gws[(w+i)%len(gws)]
				switch harness.Status("GET", g.URL+"/bid", "X-API-Key", "hot-key") {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
				sent.Add(1)
				<-tick.C
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	calls := harness.Scrape(t, gws[0].Admin, "sentinel_limit_store_calls_total") - callsBefore
	t.Logf("leased permits that expired unused: %.0f; refusals from the local cache: %.0f",
		harness.Scrape(t, gws[0].Admin, "sentinel_limit_expired_permits_total"), harness.Scrape(t, gws[0].Admin, "sentinel_limit_cached_denials_total"))

	got := up.Arrivals("hot-key")
	slices.SortFunc(got, func(a, b time.Time) int { return a.Compare(b) })
	worst := 0
	for i := range got {
		j, _ := slices.BinarySearchFunc(got, got[i].Add(window), func(a, b time.Time) int { return a.Compare(b) })
		worst = max(worst, j-i)
	}
	// The budget of the run: the limit in every window it spans.
	windows := float64(elapsed) / float64(window)
	wantTotal := 0.9 * limitPerWindow * windows
	t.Logf("offered %d (%.0f/s) through 3 pods for %v: %d approved, %d limited, %d other; "+
		"busiest %v window held %d (limit %d); %.1f%% of the budget of %.0f approvals; "+
		"store calls %.0f = %.2f per approved request",
		sent.Load(), float64(sent.Load())/elapsed.Seconds(), elapsed.Round(time.Millisecond), ok.Load(), limited.Load(), other.Load(),
		window, worst, limitPerWindow, 100*float64(len(got))/(limitPerWindow*windows), limitPerWindow*windows, calls, calls/float64(max(ok.Load(), 1)))
	assert.Zero(t, other.Load(), "every answer is 200 or 429")
	assert.Equal(t, int(ok.Load()), len(got), "the upstream saw every approved request")
	assert.LessOrEqual(t, worst, limitPerWindow, "a window held more approvals than the limit")
	assert.GreaterOrEqual(t, float64(len(got)), wantTotal, "the pods approved less than 90%% of the budget")
}
