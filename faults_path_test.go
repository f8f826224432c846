package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/redistest"
)

// replayConfig is a gateway behind a trusted proxy (the test client, on
// loopback) with a sliding_log rule of 5 per 10s for tenant hot, keeping
// its counts in Redis under prefix; trust is identity.trust_request_id
// ("" for the default).
func replayConfig(upstream, redisAddr, prefix, trust string) string {
	identity := ""
	if trust != "" {
		identity = "identity: {trust_request_id: " + trust + "}\n"
	}
	return testConfig(upstream, fmt.Sprintf(`
server: {trusted_proxies: [127.0.0.1/32]}
%sredis: {addrs: [%q], key_prefix: %s}
limits: {ip: 0, store_timeout: 1s}
rules:
  - {tenant: hot, resource: default, algorithm: sliding_log, limit: 5, window: 10s}
`, identity, redisAddr, prefix))
}

// TestFaultRequestIDReplay: one request ID sent over and over through a
// trusted proxy, each time for another client address, cannot switch a
// sliding_log limit off. With proxies trusted for IDs, the ID spares at
// most limits.request_id_retries (2) counts; by default (only the check
// API is trusted) it spares none; the check API caller's ID spares at
// most the allowance too.
func TestFaultRequestIDReplay(t *testing.T) {
	const (
		limit   = 5
		retries = 2
		sent    = 40
	)
	srv := redistest.Start(t)
	up := startUpstream(t)

	proxied := func(t *testing.T, g *gateway, id func(i int) string) (ok, limited int) {
		for i := range sent {
			a := do(t, "GET", g.url+"/replay", "", "X-API-Key", "hot-key", "X-Request-Id", id(i),
				"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
			switch a.status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Fatalf("request %d: status %d %s", i, a.status, a.body)
			}
		}
		return ok, limited
	}
	repeats := func(t *testing.T, g *gateway) (spared, counted float64) {
		return scrape(t, g.admin, "sentinel_limit_request_id_repeats_total", "result", "spared"),
			scrape(t, g.admin, "sentinel_limit_request_id_repeats_total", "result", "counted")
	}
	same := func(int) string { return "same-id" }

	t.Run("ProxiesTrusted", func(t *testing.T) {
		g := startGateway(t, replayConfig(up.url, srv.Addr, "proxies", "proxies"))
		spared0, counted0 := repeats(t, g)
		arrived0 := up.count()
		ok, limited := proxied(t, g, same)
		spared, counted := repeats(t, g)
		t.Logf("faults: request ID replay, proxies trusted: %d sent with one ID, %d × 200, %d × 429; spared %.0f, counted %.0f; upstream got %d",
			sent, ok, limited, spared-spared0, counted-counted0, up.count()-arrived0)
		assert.Equal(t, limit+retries, ok, "the limit plus the retry allowance, not every request")
		assert.Equal(t, sent-limit-retries, limited)
		assert.Equal(t, float64(retries), spared-spared0, "spared repeats")
		assert.Equal(t, float64(sent-1-retries), counted-counted0, "repeats past the allowance, counted as new requests")
		assert.Equal(t, limit+retries, up.count()-arrived0, "requests the upstream received")
	})

	t.Run("DefaultTrust", func(t *testing.T) {
		g := startGateway(t, replayConfig(up.url, srv.Addr, "default", ""))
		spared0, _ := repeats(t, g)
		ok, limited := proxied(t, g, same)
		spared, _ := repeats(t, g)
		t.Logf("faults: request ID replay, default trust (check API only): %d sent with one ID through a trusted proxy, %d × 200, %d × 429, spared %.0f",
			sent, ok, limited, spared-spared0)
		assert.Equal(t, limit, ok, "a proxied ID spares nothing by default")
		assert.Equal(t, float64(0), spared-spared0)
	})

	t.Run("DistinctIDs", func(t *testing.T) {
		g := startGateway(t, replayConfig(up.url, srv.Addr, "distinct", "proxies"))
		ok, limited := proxied(t, g, func(i int) string { return fmt.Sprintf("id-%d", i) })
		t.Logf("faults: request ID replay baseline, distinct IDs: %d × 200, %d × 429", ok, limited)
		assert.Equal(t, limit, ok)
		assert.Equal(t, sent-limit, limited)
	})

	t.Run("CheckAPI", func(t *testing.T) {
		g := startGateway(t, replayConfig(up.url, srv.Addr, "check", ""))
		allowed := 0
		for i := range sent {
			a := do(t, "POST", g.admin+"/v1/ratelimit/check",
				`{"tenant_id":"hot","resource":"default","request_id":"same-check-id"}`, "Content-Type", "application/json")
			require.Equal(t, http.StatusOK, a.status, "check %d: %s", i, a.body)
			if strings.Contains(string(a.body), `"allowed":true`) {
				allowed++
			}
		}
		t.Logf("faults: request ID replay through the check API: %d checks with one request_id, %d allowed", sent, allowed)
		assert.Equal(t, limit+retries, allowed)
	})
}

// streamUpstream answers /stream with chunks every interval for total
// (chunked, flushed one by one) and /stall with one chunk and then
// nothing for stall; it reports how many bytes of /stream it wrote.
func streamUpstream(t *testing.T, chunk []byte, interval, total, stall time.Duration) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		for end := time.Now().Add(total); time.Now().Before(end); {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			f.Flush()
			select {
			case <-time.After(interval):
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(chunk)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(stall):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// captureLog sends the process's slog lines to a buffer until the test
// ends.
func captureLog(t *testing.T) *lockedBuffer {
	t.Helper()
	buf := &lockedBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFaultLongAnswer: the upstream timeout bounds the wait for the
// answer's head, not its body. An answer streamed for 4s through a pool
// whose timeout is 2s arrives whole; a body that stops sending for longer
// than body_idle_timeout is cut, counted in
// sentinel_upstream_cut_answers_total{reason="body_idle"} and logged.
func TestFaultLongAnswer(t *testing.T) {
	const (
		interval = 200 * time.Millisecond
		streamed = 4 * time.Second
	)
	chunk := bytes.Repeat([]byte("x"), 1000)
	up := streamUpstream(t, chunk, interval, streamed, 10*time.Second)
	logs := captureLog(t)
	g := startGateway(t, fmt.Sprintf(`
upstreams:
  api: {targets: [%q], timeout: 2s, body_idle_timeout: 1s}
routes:
  - {path_prefix: /, upstream: api, resource: default}
adaptive: {enabled: false}
`, up))
	cut := func() float64 {
		return scrape(t, g.admin, "sentinel_upstream_cut_answers_total", "upstream", "api", "reason", "body_idle")
	}
	cut0 := cut()

	start := time.Now()
	resp, err := http.Get(g.url + "/stream")
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	require.NoError(t, err, "the streamed answer ended with an error after %d bytes and %v", n, took)
	want := int64(len(chunk)) * int64(streamed/interval)
	t.Logf("faults: long answer: %d bytes over %v through a 2s upstream timeout (upstream wrote about %d)", n, took.Round(time.Millisecond), want)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// The upstream writes a chunk, then waits: it wrote streamed/interval
	// chunks, one more when its last wait ended just before the end.
	assert.GreaterOrEqual(t, n, want, "the whole answer arrived")
	assert.LessOrEqual(t, n, want+int64(len(chunk)))
	assert.GreaterOrEqual(t, took, streamed, "the answer took its whole time")
	assert.Equal(t, float64(0), cut()-cut0, "a live stream is not cut")

	start = time.Now()
	resp, err = http.Get(g.url + "/stall")
	require.NoError(t, err)
	n, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took = time.Since(start)
	t.Logf("faults: stalled answer: %d bytes, then cut after %v (%v); cut answers counted %.0f", n, took.Round(time.Millisecond), err, cut()-cut0)
	assert.Error(t, err, "a cut body is not passed off as whole")
	assert.Equal(t, int64(len(chunk)), n, "the bytes sent before the stall")
	assert.GreaterOrEqual(t, took, time.Second, "not cut before body_idle_timeout")
	assert.Less(t, took, 10*time.Second, "cut well before the upstream's stall ends")
	assert.Equal(t, float64(1), cut()-cut0)
	assert.Contains(t, logs.String(), "upstream answer cut")
	assert.Contains(t, logs.String(), "reason=body_idle")
}
