package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// These tests try to turn the gateway's protection against the traffic it
// protects: a client that breaks its requests, a backend that sheds with
// 503, a backend that is down. Only the upstream's own failures may eject a
// target, trip a breaker or move the adaptive signals.

// protectionConfig: adaptive protection on, Redis store, one upstream with
// quick passive ejection and breaker, a small body limit and a short read
// timeout.
func protectionConfig(redisAddr string, targets ...string) string {
	return fmt.Sprintf(`
server: {read_timeout: 400ms, max_request_body: 1KB}
redis: {addrs: [%q]}
upstreams:
  api:
    targets: [%s]
    passive: {failures: 3, eject_for: 10s}
    breaker: {failures: 3, open_for: 10s}
routes:
  - {path_prefix: /, upstream: api, resource: default}
tenants:
  - {id: gold, plan: PREMIUM, api_keys: [gold-key]}
limits: {ip: 0, tenant: 100000, store_timeout: 50ms}
adaptive: {enabled: true}
`, redisAddr, `"`+strings.Join(targets, `","`)+`"`)
}

// rawExchange writes head (and body) on a fresh connection, then reads every
// response the gateway sends until it closes the connection or goes quiet
// for a second. It returns their status codes and whether the gateway
// closed the connection.
func rawExchange(t *testing.T, addr, request string, stall time.Duration, hangUp bool) (codes []int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, request)
	require.NoError(t, err)
	if hangUp {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	time.Sleep(stall)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes, err == io.EOF || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "EOF")
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

// adaptiveState reads GET /v1/state.
// assertUpstreamUntouched checks that nothing counted against the upstream:
// no ejection, no breaker trip, no upstream error, no error signal, Normal
// mode; and that a client is served.
// Metrics are per process, so every series is read for the test's own
// target URL (a fresh port).
func assertUpstreamUntouched(t *testing.T, g *harness.Gateway, target string) {
	t.Helper()
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_ejections_total", "target", target), "ejections")
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_breaker_transitions_total", "target", target), "breaker transitions")
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_requests_total", "target", target, "outcome", "error"), "upstream errors")
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_requests_total", "target", target, "outcome", "timeout"), "upstream timeouts")
	st := g.State(t, "adaptive")
	// The upstream signals did not move. (The mode itself also reads this
	// machine's CPU and scheduler, which parallel test packages load, so
	// only the modes that client faults could cause are ruled out.)
	assert.Zero(t, st["signals"].(map[string]any)["upstream_errors"], "error signal")
	assert.Zero(t, st["signals"].(map[string]any)["upstream_latency"], "latency signal")
	assert.NotContains(t, []any{"aggressive", "critical"}, st["mode"])
	assert.Equal(t, http.StatusOK, harness.Status("GET", g.URL+"/after"), "other clients are served")
}

func TestClientFaultsCountAgainstNothing(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	g := harness.Start(t, protectionConfig(srv.Addr, up.URL))
	addr := strings.TrimPrefix(g.URL, "http://")
	head := "POST /upload HTTP/1.1\r\nHost: example\r\n"

	t.Run("malformed chunked body", func(t *testing.T) {
		for range 10 {
			codes, closed := rawExchange(t, addr, head+"Transfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n", 0, false)
			assert.Equal(t, []int{400}, codes, "one answer, 400")
			assert.True(t, closed, "and the connection is closed")
		}
	})
	t.Run("body over the limit", func(t *testing.T) {
		big := strings.Repeat("x", 4096)
		for range 5 {
			codes, closed := rawExchange(t, addr, head+"Transfer-Encoding: chunked\r\n\r\n1000\r\n"+big+"\r\n0\r\n\r\n", 0, false)
			assert.Equal(t, []int{413}, codes)
			assert.True(t, closed)
			codes, closed = rawExchange(t, addr, head+"Content-Length: 4096\r\n\r\n"+big, 0, false)
			assert.Equal(t, []int{413}, codes)
			assert.True(t, closed)
		}
	})
	t.Run("slow upload", func(t *testing.T) {
		cut := func() float64 {
			return harness.Scrape(t, g.Admin, "sentinel_conn_timeouts_total", "listener", "proxy", "phase", "read")
		}
		before := cut()
		for range 5 {
			codes, closed := rawExchange(t, addr, head+"Content-Length: 100\r\n\r\n0123456789", 0, false)
			assert.Equal(t, []int{408}, codes, "the body did not come within read_timeout")
			assert.True(t, closed)
		}
		// The listener cut them (the metrics are the process's: other
		// gateways of this test binary may add to the count, never take).
		assert.GreaterOrEqual(t, cut()-before, 5.0, "read_timeout cuts counted")
	})
	t.Run("client disconnect", func(t *testing.T) {
		for range 10 {
			codes, _ := rawExchange(t, addr, head+"Content-Length: 100\r\n\r\n0123456789", 0, true)
			assert.LessOrEqual(t, len(codes), 1, "at most one answer to a client that left")
		}
	})
	assertUpstreamUntouched(t, g, up.URL)
	assert.NotZero(t, harness.Scrape(t, g.Admin, "sentinel_proxy_client_faults_total", "kind", "malformed"))
	assert.NotZero(t, harness.Scrape(t, g.Admin, "sentinel_proxy_client_faults_total", "kind", "timeout"))
	assert.NotZero(t, harness.Scrape(t, g.Admin, "sentinel_proxy_rejections_total", "reason", "body_too_large"))
}

// A backend that sheds with 503 is backpressure: its only target is never
// ejected, its breaker never opens, the concurrency limit backs off, and
// the moment it stops shedding every request is served again.
func TestUpstream503BurstIsBackpressure(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	g := harness.Start(t, protectionConfig(srv.Addr, up.URL))
	up.SetStatus(503)
	gatewayErrors := harness.Scrape(t, g.Admin, "sentinel_proxy_upstream_errors_total")
	backoffs := harness.Scrape(t, g.Admin, "sentinel_concurrency_backoffs_total")
	for range 100 {
		assert.Equal(t, http.StatusServiceUnavailable, harness.Status("GET", g.URL+"/x", "X-API-Key", "gold-key"))
	}
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_ejections_total", "target", up.URL))
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_breaker_transitions_total", "target", up.URL))
	assert.EqualValues(t, 100, harness.Scrape(t, g.Admin, "sentinel_upstream_requests_total", "target", up.URL, "outcome", "backpressure"))
	assert.Greater(t, harness.Scrape(t, g.Admin, "sentinel_concurrency_backoffs_total"), backoffs)
	assert.Equal(t, gatewayErrors, harness.Scrape(t, g.Admin, "sentinel_proxy_upstream_errors_total"), "every 503 was the backend's")
	up.SetStatus(200)
	hits := up.Hits()
	for range 20 {
		assert.Equal(t, http.StatusOK, harness.Status("GET", g.URL+"/x", "X-API-Key", "gold-key"))
	}
	assert.EqualValues(t, 20, up.Hits()-hits, "served at once: nothing was held out")
}

// Connection refused is a target failure: the dead target is ejected (one of
// two: within max_ejection_percent) and the live one serves everything; a
// pool whose only target is down answers 502 and serves again the moment it
// is back.
func TestUpstreamConnectionRefused(t *testing.T) {
	srv := redistest.Start(t)
	live := harness.StartUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := ln.Addr().String()
	require.NoError(t, ln.Close())

	g := harness.Start(t, protectionConfig(srv.Addr, live.URL, "http://"+deadAddr))
	for range 20 {
		assert.Equal(t, http.StatusOK, harness.Status("GET", g.URL+"/x"), "a refused connection is retried on the live target")
	}
	assert.EqualValues(t, 1, harness.Scrape(t, g.Admin, "sentinel_upstream_ejections_total", "target", "http://"+deadAddr))
	assertUpstreamUntouched(t, g, live.URL)
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_ejections_total", "target", live.URL))

	// (metrics are per process: the lone pool gets a target URL of its own)
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr = ln.Addr().String()
	require.NoError(t, ln.Close())
	alone := harness.Start(t, protectionConfig(srv.Addr, "http://"+deadAddr))
	for range 10 {
		assert.Equal(t, http.StatusBadGateway, harness.Status("GET", alone.URL+"/x"))
	}
	deadURL := "http://" + deadAddr
	assert.Zero(t, harness.Scrape(t, alone.Admin, "sentinel_upstream_ejections_total", "target", deadURL), "the only target stays in")
	assert.Zero(t, harness.Scrape(t, alone.Admin, "sentinel_upstream_breaker_transitions_total", "target", deadURL, "to", "open"))
	back, err := net.Listen("tcp", deadAddr)
	require.NoError(t, err)
	backSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go func() { _ = backSrv.Serve(back) }()
	t.Cleanup(func() { _ = backSrv.Close() })
	assert.Equal(t, http.StatusOK, harness.Status("GET", alone.URL+"/x"), "served as soon as it is back")
}

// A body that trickles in is the client's slowness, never an upstream
// timeout. A small body is received whole before it takes a slot or
// reaches the upstream (server.request_buffer): it is then served, whatever
// the upstream timeout. A body larger than the buffer streams: when it is
// still arriving past the upstream timeout, the answer is 408 and nothing
// counts against the target.
func TestTrickleUploadIsTheClients(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := strings.Replace(protectionConfig(srv.Addr, up.URL), "read_timeout: 400ms", "read_timeout: 5s", 1)
	cfg = strings.Replace(cfg, "passive: {failures: 3, eject_for: 10s}", "passive: {failures: 3, eject_for: 10s}\n    timeout: 300ms", 1)
	trickle := func(g *harness.Gateway, end bool) *http.Response {
		c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: example\r\nTransfer-Encoding: chunked\r\n\r\n")
		require.NoError(t, err)
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(c, "1\r\nx\r\n"); err != nil {
				break // the gateway answered and closed
			}
		}
		if end {
			_, _ = io.WriteString(c, "0\r\n\r\n")
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		return resp
	}

	buffered := harness.Start(t, cfg)
	hits := up.Hits()
	for range 2 {
		resp := trickle(buffered, true)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "received whole, then forwarded")
	}
	assert.EqualValues(t, 2, up.Hits()-hits)

	streamed := harness.Start(t, strings.Replace(cfg, "max_request_body: 1KB", "max_request_body: 1KB, request_buffer: 2", 1))
	for range 3 {
		resp := trickle(streamed, false)
		assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
		assert.True(t, resp.Close, "the connection ends with the answer")
	}
	assertUpstreamUntouched(t, streamed, up.URL)
}

// A flood that the gateway refuses itself is not pressure. Refusing costs
// CPU, and counted whole that CPU would push the gateway into Moderate and
// up, cutting every tenant's limits, which refuses more: a loop fed by the
// gateway's own answers. The flood's clients run in this process and share
// its CPU, so the CPU and scheduler signals would read the busy cores in
// full; weighed by the share of requests forwarded, they stay at zero, and
// a calm tenant keeps its whole limit. The flood's budget is spent through
// the check API before it starts, so that none of its requests is
// forwarded whatever the machine's load: a forwarded request counts with
// the gateway's real delay, which another process on the machine can make
// full (that is pressure, and not this test's subject).
func TestRefusedFloodIsNotPressure(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, fmt.Sprintf(`
upstreams:
  api: {targets: [%q]}
routes:
  - {path_prefix: /, upstream: api, resource: default}
tenants:
  - {id: flood, plan: FREE, api_keys: [flood-key]}
  - {id: calm, plan: FREE, api_keys: [calm-key]}
rules:
  - {tenant: flood, resource: default, limit: 20, window: 1h}
limits: {ip: 0, api_key: 0, tenant: 20}
# The default weights but memory's: the host's memory, which other work on
# the machine may fill, is not what the flood costs.
adaptive:
  enabled: true
  weights: {cpu: 0.30, memory: 0, scheduler: 0.10, inflight: 0.15, upstream_errors: 0.10, upstream_latency: 0.15}
`, up.URL))
	spent := harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", `{"tenant_id":"flood","resource":"default","tokens_requested":20}`)
	require.Equal(t, http.StatusOK, spent.Status, "%s", spent.Body)
	require.Equal(t, true, spent.JSON(t)["allowed"], "%s", spent.Body)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if harness.Status("GET", g.URL+"/x", "X-API-Key", "flood-key") == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		})
	}
	for ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
		st := g.State(t, "adaptive")
		sig := st["signals"].(map[string]any)
		assert.Equal(t, "normal", st["mode"], "signals %v", sig)
		assert.EqualValues(t, 1, st["multiplier"])
		assert.EqualValues(t, 0, sig["forwarded_share"], "signals %v", sig)
	}
	wg.Wait()
	assert.Greater(t, refused.Load(), int64(100), "the flood was refused")
	assert.Zero(t, up.Hits(), "nothing of the flood was forwarded")
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_adaptive_mode_transitions_total"), "no mode change")
	for i := range 10 {
		assert.Equal(t, http.StatusOK, harness.Status("GET", g.URL+"/x", "X-API-Key", "calm-key"), "calm request %d", i)
	}
}
