package faults

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
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
	return harness.ConfigYAML(upstream, fmt.Sprintf(`
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
	up := harness.StartUpstream(t)

	proxied := func(t *testing.T, g *harness.Gateway, id func(i int) string) (ok, limited int) {
		for i := range sent {
			a := harness.Do(t, "GET", g.URL+"/replay", "", "X-API-Key", "hot-key", "X-Request-Id", id(i),
				"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
			switch a.Status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Fatalf("request %d: status %d %s", i, a.Status, a.Body)
			}
		}
		return ok, limited
	}
	repeats := func(t *testing.T, g *harness.Gateway) (spared, counted float64) {
		return harness.Scrape(t, g.Admin, "sentinel_limit_request_id_repeats_total", "result", "spared"),
			harness.Scrape(t, g.Admin, "sentinel_limit_request_id_repeats_total", "result", "counted")
	}
	same := func(int) string { return "same-id" }

	t.Run("ProxiesTrusted", func(t *testing.T) {
		g := harness.Start(t, replayConfig(up.URL, srv.Addr, "proxies", "proxies"))
		spared0, counted0 := repeats(t, g)
		arrived0 := int(up.Hits())
		ok, limited := proxied(t, g, same)
		spared, counted := repeats(t, g)
		t.Logf("faults: request ID replay, proxies trusted: %d sent with one ID, %d × 200, %d × 429; spared %.0f, counted %.0f; upstream got %d",
			sent, ok, limited, spared-spared0, counted-counted0, int(up.Hits())-arrived0)
		assert.Equal(t, limit+retries, ok, "the limit plus the retry allowance, not every request")
		assert.Equal(t, sent-limit-retries, limited)
		assert.Equal(t, float64(retries), spared-spared0, "spared repeats")
		assert.Equal(t, float64(sent-1-retries), counted-counted0, "repeats past the allowance, counted as new requests")
		assert.Equal(t, limit+retries, int(up.Hits())-arrived0, "requests the upstream received")
	})

	t.Run("DefaultTrust", func(t *testing.T) {
		g := harness.Start(t, replayConfig(up.URL, srv.Addr, "default", ""))
		spared0, _ := repeats(t, g)
		ok, limited := proxied(t, g, same)
		spared, _ := repeats(t, g)
		t.Logf("faults: request ID replay, default trust (check API only): %d sent with one ID through a trusted proxy, %d × 200, %d × 429, spared %.0f",
			sent, ok, limited, spared-spared0)
		assert.Equal(t, limit, ok, "a proxied ID spares nothing by default")
		assert.Equal(t, float64(0), spared-spared0)
	})

	t.Run("DistinctIDs", func(t *testing.T) {
		g := harness.Start(t, replayConfig(up.URL, srv.Addr, "distinct", "proxies"))
		ok, limited := proxied(t, g, func(i int) string { return fmt.Sprintf("id-%d", i) })
		t.Logf("faults: request ID replay baseline, distinct IDs: %d × 200, %d × 429", ok, limited)
		assert.Equal(t, limit, ok)
		assert.Equal(t, sent-limit, limited)
	})

	t.Run("CheckAPI", func(t *testing.T) {
		g := harness.Start(t, replayConfig(up.URL, srv.Addr, "check", ""))
		allowed := 0
		for i := range sent {
			a := harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check",
				`{"tenant_id":"hot","resource":"default","request_id":"same-check-id"}`, "Content-Type", "application/json")
			require.Equal(t, http.StatusOK, a.Status, "check %d: %s", i, a.Body)
			if strings.Contains(string(a.Body), `"allowed":true`) {
				allowed++
			}
		}
		t.Logf("faults: request ID replay through the check API: %d checks with one request_id, %d allowed", sent, allowed)
		assert.Equal(t, limit+retries, allowed)
	})
}

// streamUpstream answers /stream with chunks every interval for total
// (chunked, flushed one by one), /trickle with a byte every interval for
// total under a Content-Length (small: the gateway reads it whole, not
// streamed) and /stall with one chunk and then nothing for stall; wrote
// counts the bytes of /stream it wrote (on a busy machine its waits run
// late, and it writes fewer chunks than total/interval).
func streamUpstream(t *testing.T, chunk []byte, interval, total, stall time.Duration) (url string, wrote *atomic.Int64) {
	t.Helper()
	wrote = new(atomic.Int64)
	u := harness.StartUpstream(t)
	u.Handle("/stream", func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		for end := time.Now().Add(total); time.Now().Before(end); {
			n, err := w.Write(chunk)
			wrote.Add(int64(n))
			if err != nil {
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
	u.Handle("/trickle", func(w http.ResponseWriter, r *http.Request) {
		n := int(total / interval)
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for range n {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(interval):
			case <-r.Context().Done():
				return
			}
		}
	})
	u.Handle("/stall", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(chunk)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(stall):
		case <-r.Context().Done():
		}
	})
	return u.URL, wrote
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
	up, wrote := streamUpstream(t, chunk, interval, streamed, 10*time.Second)
	logs := harness.CaptureLog(t)
	g := harness.Start(t, fmt.Sprintf(`
upstreams:
  api: {targets: [%q], timeout: 2s, body_idle_timeout: 1s}
routes:
  - {path_prefix: /, upstream: api, resource: default}
adaptive: {enabled: false}
`, up))
	cut := func() float64 {
		return harness.Scrape(t, g.Admin, "sentinel_upstream_cut_answers_total", "upstream", "api", "reason", "body_idle")
	}
	cut0 := cut()

	start := time.Now()
	resp, err := http.Get(g.URL + "/stream")
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	require.NoError(t, err, "the streamed answer ended with an error after %d bytes and %v", n, took)
	t.Logf("faults: long answer: %d bytes over %v through a 2s upstream timeout (upstream wrote %d)", n, took.Round(time.Millisecond), wrote.Load())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, wrote.Load(), n, "the whole answer arrived")
	// The upstream writes a chunk, then waits: streamed/interval chunks,
	// one more when its last wait ended just before the end, fewer when its
	// waits ran late.
	assert.GreaterOrEqual(t, n, int64(len(chunk))*int64(streamed/interval/2), "the upstream streamed for its whole time")
	assert.LessOrEqual(t, n, int64(len(chunk))*int64(streamed/interval+1))
	assert.GreaterOrEqual(t, took, streamed, "the answer took its whole time")
	assert.Equal(t, float64(0), cut()-cut0, "a live stream is not cut")

	// The same through an answer small enough to be read whole.
	start = time.Now()
	resp, err = http.Get(g.URL + "/trickle")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took = time.Since(start)
	require.NoError(t, err)
	t.Logf("faults: long small answer: %d bytes over %v, read whole through a 2s upstream timeout", len(body), took.Round(time.Millisecond))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, body, int(streamed/interval))
	assert.GreaterOrEqual(t, took, streamed-interval)
	assert.Equal(t, float64(0), cut()-cut0)

	start = time.Now()
	resp, err = http.Get(g.URL + "/stall")
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

// TestFaultRestartUnderKeepAlive: pods restarted one after another while
// a client POSTs at about 300 requests a second over kept-alive
// connections, through a balancer that sends new connections to the
// newest pod from the moment the old one is told to stop (as endpoints
// do once readiness fails). Each old pod drains through the same path
// as SIGTERM (drain for server.drain_delay, then shut down): no POST may
// fail.
func TestFaultRestartUnderKeepAlive(t *testing.T) {
	const (
		workers = 12
		period  = 40 * time.Millisecond // per worker: 300 requests a second in all
	)
	delays := []time.Duration{500 * time.Millisecond, 0, 300 * time.Millisecond, 0, 200 * time.Millisecond, 0, 0, 0}
	up := harness.StartUpstream(t)
	cfg := fmt.Sprintf(`
upstreams:
  api: {targets: [%q]}
routes:
  - {path_prefix: /, upstream: api, resource: default}
limits: {ip: 0}
adaptive: {enabled: false}
`, up.URL)
	pods := []*harness.Gateway{harness.Start(t, cfg)}
	var current atomic.Pointer[string]
	addr := strings.TrimPrefix(pods[0].URL, "http://")
	current.Store(&addr)
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 64,
		// Well below the pod's drain idle (1 s), as a client must be that
		// sends POSTs it cannot send again: a pod that shuts down closes
		// only connections idle that long, so none is closed as this
		// client picks it from its pool. (With a longer idle timeout, a
		// burst that reaches a connection idle for a second just as the
		// pod closes it loses that POST: the keep-alive race of HTTP/1.1.)
		// The pod counts the idle time from its answer, the client from
		// reading it: 750 ms of margin for a client slow to read on a
		// busy machine (500 ms lost one POST of 3,993 in a CI run).
		IdleConnTimeout: 250 * time.Millisecond,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, *current.Load())
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}

	var sent, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; ; i++ {
				// Poisson arrivals: requests come at any moment of a drain,
				// not in step with each other.
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(rng.ExpFloat64() * float64(period))):
				}
				sent.Add(1)
				body := fmt.Sprintf(`{"worker":%d,"n":%d}`, w, i)
				// A body the client cannot rewind (as a streamed one): the
				// client does not send it again on another connection.
				resp, err := c.Post("http://pods.test/orders", "application/json", io.MultiReader(strings.NewReader(body)))
				if isDialError(err) {
					// The connection was never opened (a pod that stops
					// without drain_delay resets the connections still in
					// its listener's queue): nothing was sent, and a client
					// tries a connection it could not open again.
					resp, err = c.Post("http://pods.test/orders", "application/json", io.MultiReader(strings.NewReader(body)))
				}
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			}
		}()
	}

	time.Sleep(time.Second)
	drainAnswers := func(g *harness.Gateway) float64 {
		return harness.Scrape(t, g.Admin, "sentinel_proxy_drain_answers_total")
	}
	for i, d := range delays {
		next := harness.Start(t, cfg)
		pods = append(pods, next)
		old := pods[i]
		// A kept-alive connection of the old pod's, used once before the
		// drain: its next answer, during the drain, must close it.
		probe := dial(t, old.URL)
		require.Equal(t, false, probe.post(t).Close, "kept alive before the drain")
		answers0 := drainAnswers(next)

		addr := strings.TrimPrefix(next.URL, "http://")
		current.Store(&addr)
		delay := d
		start := time.Now()
		stopped := make(chan error, 1)
		go func() {
			old.Drain(delay)
			stopped <- old.Shutdown(5 * time.Second)
		}()
		if d > 0 {
			harness.Eventually(t, d/2, "the old pod draining", func() bool { return !old.Ready() })
			resp := probe.post(t)
			assert.True(t, resp.Close, "an answer during the drain carries Connection: close (restart %d)", i+1)
		}
		err := <-stopped
		t.Logf("faults: restart %d (drain_delay %v): old pod stopped in %v (%v); %d sent, %d failed so far; %.0f answers closed by drains",
			i+1, d, time.Since(start).Round(time.Millisecond), err, sent.Load(), failed.Load(), drainAnswers(next)-answers0)
		time.Sleep(500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("faults: %d restarts under keep-alive POST load: %d sent, %d failed %v", len(delays), sent.Load(), failed.Load(), failures)
	assert.Zero(t, failed.Load(), "failed POSTs: %v", failures)
	assert.Greater(t, sent.Load(), int64(len(delays)*200), "the load ran")
}

// rawConn is one kept-alive connection of a client that sends a request
// and reads its answer, with no retry of its own.
type rawConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &rawConn{conn: c, r: bufio.NewReader(c)}
}

// post sends a POST and returns its answer (read whole).
func (c *rawConn) post(t *testing.T) *http.Response {
	t.Helper()
	require.NoError(t, c.conn.SetDeadline(time.Now().Add(5*time.Second)))
	body := `{"probe":true}`
	_, err := fmt.Fprintf(c.conn, "POST /orders HTTP/1.1\r\nHost: pods.test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	resp, err := http.ReadResponse(c.r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return resp
}

// isDialError tells that err is a failure to open a connection: the
// request was not sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
