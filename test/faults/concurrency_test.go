package faults

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// These tests hold the concurrency limit to its promise: the backend is shed
// only when it is congested. A slower endpoint, a mix of slow and fast
// requests, the gateway's own CPU saturation and a flood of distinct keys
// are not congestion; a backend whose fixed workers queue the excess is.

// concConfig is a gateway with the memory store, one upstream called name
// and one route for every path (slow and fast requests share its resource,
// as they do under the default configuration), a PREMIUM and a FREE tenant,
// and adaptive control on; opts change it further.
func concConfig(name, target string, opts ...harness.ConfigOption) string {
	return harness.Config(target, append([]harness.ConfigOption{
		harness.WithSection("server", `{trusted_proxies: ["127.0.0.1/32"]}`),
		harness.WithUpstream(name, fmt.Sprintf(" {targets: [%q], timeout: 5s}", target)),
		harness.WithSection("tenants", "  - {id: gold, plan: PREMIUM, api_keys: [gold-key]}\n  - {id: free, plan: FREE, api_keys: [free-key]}\n"),
		harness.WithSection("limits", "{ip: 0, api_key: 0, tenant: 1000000}"),
		harness.WithSection("adaptive", "{enabled: true}"),
	}, opts...)...)
}

// tally counts answers by status.
type tally struct {
	mu    sync.Mutex
	codes map[int]int
}

func (t *tally) add(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.codes == nil {
		t.codes = map[int]int{}
	}
	t.codes[code]++
}

// served returns the 200s and all answers.
func (t *tally) served() (ok, all int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, n := range t.codes {
		all += n
		if c == http.StatusOK {
			ok += n
		}
	}
	return ok, all
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprint(t.codes)
}

// record counts an answer of a request sent at start.
func (t *tally) record(_ time.Time, code int) { t.add(code) }

// pace sends rate requests a second to url until ctx ends, each in its own
// goroutine (an open loop: a slow answer does not slow the arrivals), at
// most 512 at once, and passes each answer to record with the time its
// request was sent. It returns when every request it started has answered.
func pace(ctx context.Context, rate int, url string, record func(start time.Time, code int), headers ...string) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // the machine is too slow to keep up: skip, do not pile up
		}
		wg.Go(func() {
			defer func() { <-sem }()
			start := time.Now()
			record(start, harness.Status("GET", url, headers...))
		})
	}
}

// closedLoop runs n clients that each send their next request when the
// last one answered, until ctx ends.
func closedLoop(ctx context.Context, n int, url string, tl *tally, headers ...string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				tl.add(harness.Status("GET", url, headers...))
			}
		})
	}
	return &wg
}

// sheds reads the requests the concurrency limit shed in front of upstream.
func sheds(t *testing.T, g *harness.Gateway, upstream string) float64 {
	return harness.Scrape(t, g.Admin, "sentinel_shed_total", "upstream", upstream)
}

func concLimit(t *testing.T, g *harness.Gateway, upstream string) float64 {
	return harness.Scrape(t, g.Admin, "sentinel_concurrency_limit", "upstream", upstream)
}

// concFigures describes the limiter of upstream for the logs.
func concFigures(t *testing.T, g *harness.Gateway, upstream string) string {
	f := func(name string) float64 { return harness.Scrape(t, g.Admin, name, "upstream", upstream) }
	return fmt.Sprintf("limit %.1f, %v congestion cuts, %v back-offs, %v re-measured baselines, scheduler signal %v",
		f("sentinel_concurrency_limit"), f("sentinel_concurrency_congestion_cuts_total"),
		f("sentinel_concurrency_backoffs_total"), f("sentinel_concurrency_rebaselines_total"),
		g.State(t, "adaptive")["signals"].(map[string]any)["scheduler"])
}

// A backend with unlimited concurrency is never shed, however slow its
// answers: fast traffic teaches the limit a fast route, then the same route
// answers in 200 ms (a slower endpoint behind one prefix). Everything is
// served: the latency rose without the in-flight requests explaining it.
func TestFaultSlowerEndpointIsNotCongestion(t *testing.T) {
	const name = "fault_slower"
	up := harness.StartUpstream(t)
	up.SetSlow(200 * time.Millisecond)
	g := harness.Start(t, concConfig(name, up.URL))
	gold := []string{"X-API-Key", "gold-key"}

	var fast, slow tally
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	pace(ctx, 200, g.URL+"/fast", fast.record, gold...)
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pace(ctx, 100, g.URL+"/slow/x", slow.record, gold...)

	okFast, allFast := fast.served()
	ok, all := slow.served()
	shed := sheds(t, g, name)
	t.Logf("faults: slower endpoint: fast %d/%d served, then 200ms endpoint %d/%d PREMIUM served (%.2f%%), %v sheds, answers %v; %s",
		okFast, allFast, ok, all, 100*float64(ok)/float64(all), shed, slow.String(), concFigures(t, g, name))
	require.Greater(t, all, 300, "the load ran")
	assert.Equal(t, allFast, okFast, "fast requests all served")
	assert.GreaterOrEqual(t, float64(ok), 0.99*float64(all), "≥ 99%% of PREMIUM served on a 200 ms endpoint")
	assert.Zero(t, shed, "a backend with unlimited concurrency is never shed")
}

// A steady mix of 300 ms and fast requests on one route of one upstream
// with unlimited concurrency: nothing is shed, for any plan.
func TestFaultSlowFastMixIsNotCongestion(t *testing.T) {
	const name = "fault_mix"
	up := harness.StartUpstream(t)
	up.SetSlow(300 * time.Millisecond)
	g := harness.Start(t, concConfig(name, up.URL))

	var fast, slow, free tally
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { pace(ctx, 150, g.URL+"/fast", fast.record, "X-API-Key", "gold-key") })
	wg.Go(func() { pace(ctx, 60, g.URL+"/slow/x", slow.record, "X-API-Key", "gold-key") })
	wg.Go(func() { pace(ctx, 40, g.URL+"/slow/y", free.record, "X-API-Key", "free-key") })
	wg.Wait()

	shed := sheds(t, g, name)
	okF, allF := fast.served()
	okS, allS := slow.served()
	okR, allR := free.served()
	t.Logf("faults: slow/fast mix: fast %d/%d, 300ms PREMIUM %d/%d, 300ms FREE %d/%d served, %v sheds; %s",
		okF, allF, okS, allS, okR, allR, shed, concFigures(t, g, name))
	require.Greater(t, allS, 200, "the load ran")
	assert.Zero(t, shed, "a mix of slow and fast requests is not congestion")
	assert.Equal(t, allF, okF)
	assert.Equal(t, allS, okS)
	assert.Equal(t, allR, okR)
}

// After a collapse (the backend shed everything with 503 for 4 s, and the
// limit backed off far below what the load needs), a backend that is
// healthy again, with a 200 ms endpoint that needs about 20 requests in
// flight, gets its capacity back within 5 s: the limit is above the
// requests in flight the load needs, and every request is served.
func TestFaultRecoveryAfterCollapse(t *testing.T) {
	const name = "fault_recovery"
	up := harness.StartUpstream(t)
	up.SetSlow(200 * time.Millisecond)
	g := harness.Start(t, concConfig(name, up.URL))
	gold := []string{"X-API-Key", "gold-key"}

	// Learn the route, then collapse the limit with the backend's 503s.
	var warm tally
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	pace(ctx, 100, g.URL+"/slow/x", warm.record, gold...)
	cancel()
	up.SetStatus(http.StatusServiceUnavailable)
	var burst tally
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
	pace(ctx, 100, g.URL+"/slow/x", burst.record, gold...)
	cancel()
	collapsed := concLimit(t, g, name)
	require.Less(t, collapsed, 16.0, "the backend's 503s backed the limit off below the 20 requests in flight the load needs (answers %v)", burst.String())

	up.SetStatus(http.StatusOK)
	healed := time.Now()
	var mu sync.Mutex
	var lastRefused time.Duration // after healing, of the last request not served
	var after tally               // requests sent 5 s or more after healing
	ctx, cancel = context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	recovered := make(chan time.Duration, 1)
	go func() { // when the limit has room for the load again
		for ctx.Err() == nil {
			if concLimit(t, g, name) >= 24 {
				recovered <- time.Since(healed)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	pace(ctx, 100, g.URL+"/slow/x", func(start time.Time, code int) {
		since := start.Sub(healed)
		if since >= 5*time.Second {
			after.add(code)
		}
		if code != http.StatusOK {
			mu.Lock()
			lastRefused = max(lastRefused, since)
			mu.Unlock()
		}
	}, gold...)
	took, back := time.Duration(0), "never"
	select {
	case took = <-recovered:
		back = took.Round(10 * time.Millisecond).String()
	default:
		took = -1
	}
	ok, all := after.served()
	t.Logf("faults: recovery: limit %.1f after 4 s of 503s (answers %v); limit ≥ 24 again: %s after the backend healed; last request not served sent at %v; %d/%d served from 5 s on; %s",
		collapsed, burst.String(), back, lastRefused.Round(10*time.Millisecond), ok, all, concFigures(t, g, name))
	require.Greater(t, all, 100, "the load ran")
	assert.True(t, took >= 0 && took <= 5*time.Second, "the limit has room for the load within 5 s (took %v)", took)
	assert.Equal(t, all, ok, "everything is served from 5 s on (answers %v)", after.String())
}

// A backend with 4 workers and a 40 ms service time (100 answers a second)
// under 32 clients in a closed loop is congested: its queue, and so its
// latency, grows with the requests in flight. The concurrency limit sheds
// the excess (FREE first) and holds the backend's in-flight requests near
// its capacity; PREMIUM is served.
func TestFaultCongestedBackendIsShed(t *testing.T) {
	const name = "fault_congested"
	up := harness.StartUpstreamWith(t, harness.UpstreamOptions{Workers: 4})
	up.SetService(40 * time.Millisecond)
	g := harness.Start(t, concConfig(name, up.URL))

	// The route is learned at low load, below capacity.
	var warm, flood, gold tally
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	closedLoop(ctx, 2, g.URL+"/x", &warm).Wait()
	cancel()

	ctx, cancel = context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	fl := closedLoop(ctx, 32, g.URL+"/x", &flood)
	gl := closedLoop(ctx, 2, g.URL+"/x", &gold, "X-API-Key", "gold-key")
	// The backend's in-flight requests, sampled over the last 4 s.
	time.Sleep(2 * time.Second)
	var sum, n, peak int64
	for ctx.Err() == nil {
		v := up.InFlight()
		sum, n, peak = sum+v, n+1, max(peak, v)
		time.Sleep(5 * time.Millisecond)
	}
	fl.Wait()
	gl.Wait()
	mean := float64(sum) / float64(max(1, n))
	shed := sheds(t, g, name)
	okF, allF := flood.served()
	okG, allG := gold.served()
	t.Logf("faults: congested backend (4 workers): backend in flight mean %.1f, peak %d (32 clients); %v sheds; FREE %d/%d, PREMIUM %d/%d served; %s",
		mean, peak, shed, okF, allF, okG, allG, concFigures(t, g, name))
	assert.Greater(t, shed, 0.0, "the congested backend is protected")
	// On a quiet machine the backend holds 5-6 in flight. When the gateway's
	// own cores are saturated (CI runs other packages' tests beside this one),
	// its scheduling delay widens the slack before a rise counts as a queue,
	// and the backend has held up to 14 in flight: still far from the 32 that
	// reach it with no limit, which is what this bound guards.
	assert.Less(t, mean, 16.0, "the backend's in-flight requests stay near its 4 workers, not the 32 clients")
	assert.GreaterOrEqual(t, float64(okG), 0.9*float64(allG), "PREMIUM is served")
}

// A flood of distinct client addresses on a fast backend loads the gateway
// (a limit key each, its CPU shared with the clients); the backend is not
// congested and nothing is shed by the concurrency limit. The requests are
// anonymous (FREE: shed at once while the limiter reads congestion), and the
// mode thresholds are out of the way, so that every request is forwarded
// and reaches the limiter in mode Normal, as in production before the
// pressure rises.
func TestFaultKeyFloodIsNotCongestion(t *testing.T) {
	const name = "fault_keyflood"
	up := harness.StartUpstream(t)
	cfg := concConfig(name, up.URL, harness.WithSection("limits", "{ip: 1000, api_key: 0, tenant: 1000000}"),
		harness.WithSection("adaptive", "{enabled: true, thresholds: {moderate: 0.97, aggressive: 0.98, critical: 0.99}}"))
	g := harness.Start(t, cfg)
	// The flood is a number of requests, not a time: a loaded machine sends
	// them more slowly, and the deadline only bounds the test.
	const flood = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var next atomic.Int64
	var tl tally
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > flood {
					return
				}
				ip := "10." + strconv.Itoa(int(i>>16&255)) + "." + strconv.Itoa(int(i>>8&255)) + "." + strconv.Itoa(int(i&255))
				tl.add(harness.Status("GET", g.URL+"/x", "X-Forwarded-For", ip))
			}
		})
	}
	wg.Wait()
	ok, all := tl.served()
	shed := sheds(t, g, name)
	st := g.State(t, "adaptive")
	t.Logf("faults: key flood: %d distinct client addresses, %d/%d served, %v concurrency sheds, mode %v, answers %v; %s",
		min(next.Load(), flood), ok, all, shed, st["mode"], tl.String(), concFigures(t, g, name))
	require.Greater(t, all, 1000, "the flood ran")
	// The backend here runs in the gateway's process on the same two cores:
	// when the flood (or another test) saturates them, the backend's latency
	// does rise with the requests in flight, a real CPU queue that the limit
	// may cut once or twice. A backend on its own machines has no such queue.
	// What must not happen is the flood read as congestion throughout: at
	// most 1% shed here.
	assert.LessOrEqual(t, shed, float64(flood)/100, "the gateway's own load is not backend congestion")
}
