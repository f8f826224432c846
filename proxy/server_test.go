package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/cache"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// backend is a real HTTP server on loopback that echoes what it received.
type backend struct {
	url     string
	healthy atomic.Bool
	hits    atomic.Int64
	srv     *http.Server
}

func startBackend(t testing.TB) *backend {
	t.Helper()
	b := &backend{}
	b.healthy.Store(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve)}
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	b.url = "http://" + ln.Addr().String()
	return b
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthz":
		if !b.healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
		return
	case strings.HasPrefix(r.URL.Path, "/sleep/"):
		d, _ := time.ParseDuration(strings.TrimPrefix(r.URL.Path, "/sleep/"))
		time.Sleep(d)
	case strings.HasPrefix(r.URL.Path, "/bytes/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := make([]byte, 64<<10)
		for n > 0 {
			k := min(n, len(chunk))
			_, _ = w.Write(chunk[:k])
			n -= k
		}
		return
	}
	b.hits.Add(1)
	n, _ := io.Copy(io.Discard, r.Body)
	w.Header().Set("Connection", "X-Hop")
	w.Header().Set("X-Hop", "secret")
	w.Header().Set("Keep-Alive", "timeout=5")
	w.Header().Set("Content-Type", "application/json")
	if cc := r.URL.Query().Get("cc"); cc != "" {
		w.Header().Set("Cache-Control", cc)
	}
	h := map[string]string{}
	for k := range r.Header {
		h[k] = r.Header.Get(k)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.RequestURI(), "host": r.Host, "headers": h, "body_bytes": n})
}

// fakeLimiter is a func-field Limiter.
type fakeLimiter struct {
	allow func(req *limit.Request) limit.Decision
}

func (f *fakeLimiter) Decide(_ context.Context, req *limit.Request, d *limit.Decision) {
	*d = f.allow(req)
}

// fakeGate is a Gate with a fixed policy and a real concurrency limiter.
type fakeGate struct {
	policy adaptive.Policy
	conc   *adaptive.ConcurrencyLimiter
}

func (g *fakeGate) Policy() adaptive.Policy                                           { return g.policy }
func (g *fakeGate) RequestStarted(uint64)                                             {}
func (g *fakeGate) RequestFinished(uint64)                                            {}
func (g *fakeGate) RequestWaiting(uint64)                                             {}
func (g *fakeGate) RequestResumed(uint64)                                             {}
func (g *fakeGate) ObserveUpstream(uint64, time.Time, time.Duration, adaptive.Result) {}
func (g *fakeGate) Concurrency(string) *adaptive.ConcurrencyLimiter                   { return g.conc }

type testProxy struct {
	url string
	srv *Server
	set *upstream.Set
}

type proxyOpt func(*Deps, *upstream.Config)

func startProxy(t testing.TB, target string, opts ...proxyOpt) *testProxy {
	t.Helper()
	ucfg := upstream.Config{"api": {Targets: []string{target}, Timeout: 2 * time.Second}}
	deps := Deps{Config: Config{
		Server: ServerConfig{MaxRequestBody: 2 << 20, Listen: "127.0.0.1:0"},
		Routes: []Route{
			{PathPrefix: "/", Upstream: "api", Resource: "default"},
			{PathPrefix: "/heavy", Upstream: "api", Resource: "heavy", Heavy: true},
			{PathPrefix: "/cached", Upstream: "api", Resource: "cached", CacheTTL: time.Minute},
		},
	}}
	deps.Tenants = testTenants(t)
	for _, o := range opts {
		o(&deps, &ucfg)
	}
	ucfg.SetDefaults()
	require.NoError(t, ucfg.Validate())
	set, err := upstream.New(ucfg)
	require.NoError(t, err)
	set.Start(context.Background())
	t.Cleanup(set.Stop)
	deps.Upstreams = set
	deps.Config.SetDefaults()
	srv, err := New(deps)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return &testProxy{url: "http://" + ln.Addr().String(), srv: srv, set: set}
}

// provisioned fills c's defaults, as loading the configuration does before
// New or NewTable sees a section.
func provisioned(c Config) Config {
	c.SetDefaults()
	return c
}

// provisionedAdaptive fills c's defaults, as loading the configuration does
// before adaptive.New or Stage sees the section.
func provisionedAdaptive(c adaptive.Config) adaptive.Config {
	c.SetDefaults()
	return c
}

func testTenants(t testing.TB) *catalog.Catalog {
	cat, err := catalog.NewCatalog(nil, []catalog.Tenant{
		{ID: "acme", Plan: "PREMIUM", APIKeys: []string{"acme-key"}},
		{ID: "cheap", Plan: "FREE", APIKeys: []string{"free-key"}},
	}, nil)
	require.NoError(t, err)
	return cat
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func get(t testing.TB, url string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	return send(t, "GET", url, nil, headers...)
}

func send(t testing.TB, method, url string, body io.Reader, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

type echo struct {
	Path      string            `json:"path"`
	Host      string            `json:"host"`
	Headers   map[string]string `json:"headers"`
	BodyBytes int64             `json:"body_bytes"`
}

func parseEcho(t testing.TB, b []byte) echo {
	t.Helper()
	var e echo
	require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	return e
}

func TestHeadersInAndOut(t *testing.T) {
	be := startBackend(t)
	p := startProxy(t, be.url)
	resp, body := get(t, p.url+"/a/b?x=1&y=2", "Connection", "X-Secret", "X-Secret", "1", "Keep-Alive", "300",
		"X-Forwarded-For", "6.6.6.6", "Forwarded", "for=6.6.6.6", "X-Forwarded-Host", "evil", "X-Custom", "kept",
		"Proxy-Authorization", "Basic x")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	e := parseEcho(t, body)
	assert.Equal(t, "/a/b?x=1&y=2", e.Path)
	assert.Equal(t, "kept", e.Headers["X-Custom"])
	for _, h := range []string{"X-Secret", "Keep-Alive", "Proxy-Authorization", "Forwarded"} {
		assert.NotContains(t, e.Headers, h)
	}
	assert.Equal(t, "127.0.0.1", e.Headers["X-Forwarded-For"], "a spoofed X-Forwarded-For from an untrusted peer is dropped")
	assert.Equal(t, "http", e.Headers["X-Forwarded-Proto"])
	assert.NotEqual(t, "evil", e.Headers["X-Forwarded-Host"])
	assert.NotEmpty(t, e.Headers["X-Request-Id"])
	assert.Equal(t, e.Headers["X-Request-Id"], resp.Header.Get("X-Request-Id"))
	assert.Empty(t, resp.Header.Get("X-Hop"), "headers named in the upstream's Connection are removed")
	assert.Empty(t, resp.Header.Get("Keep-Alive"))

	// A client's X-Request-Id is propagated.
	_, body = get(t, p.url+"/", "X-Request-Id", "abc-123")
	assert.Equal(t, "abc-123", parseEcho(t, body).Headers["X-Request-Id"])
}

func TestTrustedProxyXFF(t *testing.T) {
	be := startBackend(t)
	var seenIP atomic.Value
	lim := &fakeLimiter{allow: func(r *limit.Request) limit.Decision {
		seenIP.Store(string(r.IP))
		return limit.Decision{Allowed: true}
	}}
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) {
		d.Config.Server.TrustedProxies = []string{"127.0.0.1/32", "10.0.0.0/8"}
		d.Limiter = lim
	})
	_, body := get(t, p.url+"/", "X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.1.2.3")
	e := parseEcho(t, body)
	assert.Equal(t, "203.0.113.9", seenIP.Load(), "the rightmost untrusted address is the client")
	assert.Equal(t, "6.6.6.6, 203.0.113.9, 10.1.2.3, 127.0.0.1", e.Headers["X-Forwarded-For"])
}

func TestBodies(t *testing.T) {
	be := startBackend(t)
	p := startProxy(t, be.url)
	for _, n := range []int{0, 1 << 20} {
		resp, body := send(t, "POST", p.url+"/up", strings.NewReader(strings.Repeat("x", n)))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.EqualValues(t, n, parseEcho(t, body).BodyBytes)
	}
	// A declared length over the limit is refused before the body is read
	// (the client would see its upload reset, so talk raw HTTP here).
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 3<<20, strings.Repeat("x", 64<<10))
	require.NoError(t, err)
	raw, _ := io.ReadAll(io.LimitReader(conn, 4096))
	conn.Close()
	assert.Contains(t, string(raw), "HTTP/1.1 413")
	assert.Contains(t, string(raw), `"error"`)
	var resp *http.Response
	var body []byte

	// A chunked upload streams through (under the limit).
	pr, pw := io.Pipe()
	go func() {
		chunk := []byte(strings.Repeat("y", 32<<10))
		for range 32 { // 1 MiB in chunks
			_, _ = pw.Write(chunk)
		}
		_ = pw.Close()
	}()
	resp, body = send(t, "POST", p.url+"/up", pr)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.EqualValues(t, 1<<20, parseEcho(t, body).BodyBytes)

	// A chunked upload over the limit is cut off and refused.
	conn, err = net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	require.NoError(t, err)
	go func() {
		_, _ = io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("z", 64<<10))
		for range 64 { // 4 MiB
			if _, err := io.WriteString(conn, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
	}()
	raw, _ = io.ReadAll(io.LimitReader(conn, 4096))
	conn.Close()
	assert.Contains(t, string(raw), "HTTP/1.1 413")

	// A large download streams back intact.
	resp, body = get(t, p.url+"/bytes/"+strconv.Itoa(20<<20))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, body, 20<<20)
}

func TestErrorStatuses(t *testing.T) {
	be := startBackend(t)
	// 404: no route.
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) {
		d.Config.Routes = []Route{{PathPrefix: "/api", Upstream: "api", Resource: "api"}}
	})
	resp, body := get(t, p.url+"/other")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, string(body), `"request_id"`)

	// 502: nothing listens on the target.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	p = startProxy(t, dead)
	resp, body = get(t, p.url+"/")
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s", body)

	// 504: the upstream is slower than its timeout.
	p = startProxy(t, be.url, func(_ *Deps, u *upstream.Config) {
		pc := (*u)["api"]
		pc.Timeout = 200 * time.Millisecond
		(*u)["api"] = pc
	})
	resp, _ = get(t, p.url+"/sleep/1s")
	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
}

func TestHealthCheckEjectionAndPanicMode(t *testing.T) {
	be, be2 := startBackend(t), startBackend(t)
	p := startProxy(t, be.url, func(_ *Deps, u *upstream.Config) {
		pc := (*u)["api"]
		pc.Targets = append(pc.Targets, be2.url)
		pc.HealthCheck = upstream.HealthCheckConfig{Path: "/healthz", Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond, HealthyThreshold: 1, UnhealthyThreshold: 1}
		(*u)["api"] = pc
	})
	resp, _ := get(t, p.url+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	be.healthy.Store(false)
	require.Eventually(t, func() bool {
		before := be.hits.Load()
		for range 4 {
			if r, _ := get(t, p.url+"/"); r.StatusCode != http.StatusOK {
				return false
			}
		}
		return be.hits.Load() == before
	}, 5*time.Second, 20*time.Millisecond, "the unhealthy target gets no traffic")
	// Every target unhealthy: the pool balances over all of them (panic
	// mode) instead of answering 503 for everything.
	be2.healthy.Store(false)
	time.Sleep(200 * time.Millisecond)
	for range 4 {
		r, _ := get(t, p.url+"/")
		assert.Equal(t, http.StatusOK, r.StatusCode)
	}
	be.healthy.Store(true)
	be2.healthy.Store(true)
}

func TestGracefulShutdownCompletesInFlight(t *testing.T) {
	be := startBackend(t)
	p := startProxy(t, be.url)
	done := make(chan int, 1)
	go func() {
		r, _ := get(t, p.url+"/sleep/500ms")
		done <- r.StatusCode
	}()
	time.Sleep(150 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.srv.Shutdown(ctx))
	assert.Equal(t, http.StatusOK, <-done)
}

// tenantLimiter decides every request by the tenant's limit of 10 per 10 s
// with 4 left, allowed while allowed is set, else refused for 1.5 s.
func tenantLimiter(allowed *atomic.Bool) *fakeLimiter {
	return &fakeLimiter{allow: func(r *limit.Request) limit.Decision {
		d := limit.Decision{Allowed: allowed.Load(), Scope: limit.ScopeTenant, Limit: 10, Remaining: 4,
			Reset: 3 * time.Second, Window: 10 * time.Second}
		if !d.Allowed {
			d.Remaining, d.RetryAfter = 0, 1500*time.Millisecond
		}
		return d
	}}
}

func TestRateLimitAnswers(t *testing.T) {
	be := startBackend(t)
	allowed := atomic.Bool{}
	lim := tenantLimiter(&allowed)
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) { d.Limiter = lim })
	allowed.Store(true)
	resp, _ := get(t, p.url+"/", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, `"tenant";q=10;w=10`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"tenant";r=4;t=3`, resp.Header.Get("RateLimit"))
	assert.Equal(t, "10", resp.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Retry-After-Ms"))

	allowed.Store(false)
	hits := be.hits.Load()
	resp, body := get(t, p.url+"/", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))
	assert.Equal(t, "1500", resp.Header.Get("X-RateLimit-Retry-After-Ms"))
	assert.Equal(t, `"tenant";r=0;t=2`, resp.Header.Get("RateLimit"), "a refusal's t is its retry-after")
	var b map[string]any
	require.NoError(t, json.Unmarshal(body, &b))
	assert.Equal(t, "rate limit exceeded", b["error"])
	assert.EqualValues(t, 10, b["limit"])
	assert.EqualValues(t, 1500, b["retry_after_ms"])
	assert.Equal(t, resp.Header.Get("X-Request-Id"), b["request_id"])
	assert.Equal(t, hits, be.hits.Load(), "a rejected request does not reach the upstream")
}

// TestRateLimitHeaderSets: server.rate_limit_headers picks the rate-limit
// headers of forwarded answers and refusals; a refusal keeps Retry-After
// and its JSON body whatever the set.
func TestRateLimitHeaderSets(t *testing.T) {
	be := startBackend(t)
	allowed := atomic.Bool{}
	lim := tenantLimiter(&allowed)
	draft := []string{"RateLimit-Policy", "RateLimit"}
	legacy := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Retry-After-Ms"}
	for _, c := range []struct {
		set       RateLimitHeaders
		with, out []string
	}{
		{RateLimitHeadersAll, append(draft, legacy...), nil},
		{RateLimitHeadersDraft, draft, legacy},
		{RateLimitHeadersLegacy, legacy, draft},
		{RateLimitHeadersNone, nil, append(draft, legacy...)},
	} {
		t.Run(string(c.set), func(t *testing.T) {
			p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) {
				d.Limiter = lim
				d.Config.Server.RateLimitHeaders = c.set
			})
			for _, ok := range []bool{true, false} {
				allowed.Store(ok)
				resp, body := get(t, p.url+"/", "X-API-Key", "acme-key")
				for _, n := range c.with {
					assert.NotEmpty(t, resp.Header.Get(n), "allowed %v: %s", ok, n)
				}
				for _, n := range c.out {
					assert.Empty(t, resp.Header.Values(n), "allowed %v: %s", ok, n)
				}
				if !ok {
					require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
					assert.Equal(t, "2", resp.Header.Get("Retry-After"))
					assert.Contains(t, string(body), `"retry_after_ms":1500`)
				}
			}
		})
	}
}

func TestModePolicies(t *testing.T) {
	be := startBackend(t)
	gate := &fakeGate{}
	rc := cache.New(cache.Config{})
	t.Cleanup(rc.Close)
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) {
		d.Adaptive, d.Cache = gate, rc
	})
	// Normal: the cached route fills the cache (the tenant's partition).
	resp, _ := get(t, p.url+"/cached/item?cc=public", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	gate.policy = adaptive.Policy{Mode: adaptive.Aggressive, BlockFree: true, HeavyOff: true, Strict: true, Multiplier: 0.2}
	resp, body := get(t, p.url+"/x", "X-API-Key", "free-key")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Contains(t, string(body), "FREE tier is paused")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp, _ = get(t, p.url+"/x") // anonymous counts as FREE
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp, _ = get(t, p.url+"/heavy/report", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, _ = get(t, p.url+"/x", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	gate.policy = adaptive.Policy{Mode: adaptive.Critical, BlockFree: true, HeavyOff: true, PremiumOnly: true, CacheOnly: true, Strict: true, Multiplier: 0.05}
	hits := be.hits.Load()
	resp, _ = get(t, p.url+"/cached/item?cc=public", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a cached read is served in Critical mode")
	assert.Equal(t, "HIT", resp.Header.Get("X-Sentinel-Cache"))
	assert.Equal(t, hits, be.hits.Load(), "without touching the upstream")
	resp, _ = get(t, p.url+"/cached/item?cc=public", "X-API-Key", "free-key")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the plan gate comes before the cache")
	resp, body = get(t, p.url+"/cached/miss", "X-API-Key", "free-key")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, string(body), "only PREMIUM")
	resp, _ = get(t, p.url+"/x", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "PREMIUM passes")
}

func TestConcurrencyShed(t *testing.T) {
	be := startBackend(t)
	ctrl, err := adaptive.New(provisionedAdaptive(adaptive.Config{Concurrency: adaptive.ConcurrencyConfig{InitialLimit: 1, MinLimit: 1, MaxLimit: 1, QueueTimeout: time.Millisecond}}),
		adaptive.Options{PodID: "t", Upstreams: []string{"api"}})
	require.NoError(t, err)
	defer ctrl.Stop()
	gate := &fakeGate{conc: ctrl.Concurrency("api")}
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) { d.Adaptive = gate })
	done := make(chan struct{})
	go func() {
		get(t, p.url+"/sleep/400ms", "X-API-Key", "acme-key")
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	resp, body := get(t, p.url+"/x", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), "concurrency limit")
	<-done
	resp, _ = get(t, p.url+"/x", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestWithRealLimiter runs the proxy over the real limiter and memory store.
func TestWithRealLimiter(t *testing.T) {
	be := startBackend(t)
	mem := store.NewMemoryStore(store.MemoryOptions{})
	defer mem.Close()
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.IP = 3
	cfg.Window = time.Minute
	lim, err := limit.NewLimiter(cfg, mem, limit.Options{})
	require.NoError(t, err)
	defer lim.Close()
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) { d.Limiter = lim })
	codes := []int{}
	for range 5 {
		r, _ := get(t, p.url+"/")
		codes = append(codes, r.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, codes)
}

func TestMain(m *testing.M) {
	fasthttp.SetBodySizePoolLimit(1<<20, 1<<20)
	m.Run()
}

var _ = fmt.Sprint
