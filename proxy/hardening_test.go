package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/cache"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// recorder is a backend on loopback that keeps the last request as it
// arrived and answers with a body naming the tenant of the API key it saw,
// with the Cache-Control of the "cc" query parameter and no Content-Type.
type recorder struct {
	url  string
	hits atomic.Int64
	mu   sync.Mutex
	last *http.Request
}

func startRecorder(t testing.TB) *recorder {
	t.Helper()
	rec := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: rec}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	rec.url = "http://" + ln.Addr().String()
	return rec
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		return
	}
	rec.hits.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	rec.mu.Lock()
	rec.last = r
	rec.mu.Unlock()
	w.Header()["Content-Type"] = nil // no sniffing: answer without one
	if cc := r.URL.Query().Get("cc"); cc != "" {
		w.Header().Set("Cache-Control", cc)
	}
	_, _ = io.WriteString(w, "data of key "+r.Header.Get("X-Api-Key"))
}

// request returns the last request the backend received.
func (rec *recorder) request() *http.Request {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.last
}

// raw writes a request as it is to addr and reads one response.
func raw(t testing.TB, proxyURL, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, request)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "request %q", request)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func rawGet(t testing.TB, proxyURL, target string, headers ...string) (*http.Response, string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("GET " + target + " HTTP/1.1\r\nHost: gw.test\r\n")
	for i := 0; i+1 < len(headers); i += 2 {
		b.WriteString(headers[i] + ": " + headers[i+1] + "\r\n")
	}
	b.WriteString("\r\n")
	return raw(t, proxyURL, b.String())
}

// seen records the limiter requests: tenant and resource.
type seen struct {
	mu       sync.Mutex
	tenant   string
	resource string
}

func (s *seen) limiter() *fakeLimiter {
	return &fakeLimiter{allow: func(r *limit.Request) limit.Decision {
		s.mu.Lock()
		s.tenant, s.resource = string(r.Tenant), string(r.Resource)
		s.mu.Unlock()
		return limit.Decision{Allowed: true}
	}}
}

func (s *seen) get() (tenant, resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tenant, s.resource
}

func twoPremiumTenants(t testing.TB) *catalog.Catalog {
	cat, err := catalog.NewCatalog(nil, []catalog.Tenant{
		{ID: "acme", Plan: "PREMIUM", APIKeys: []string{"acme-key"}},
		{ID: "globex", Plan: "PREMIUM", APIKeys: []string{"globex-key"}},
		{ID: "cheap", Plan: "FREE", APIKeys: []string{"free-key"}},
	}, nil)
	require.NoError(t, err)
	return cat
}

func TestCacheIsolation(t *testing.T) {
	rec := startRecorder(t)
	gate := &fakeGate{}
	rc := cache.New(cache.Config{})
	t.Cleanup(rc.Close)
	p := startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) {
		d.Adaptive, d.Cache, d.Tenants = gate, rc, twoPremiumTenants(t)
	})
	critical := adaptive.Policy{Mode: adaptive.Critical, BlockFree: true, HeavyOff: true, PremiumOnly: true, CacheOnly: true, Strict: true}

	// A PREMIUM tenant's private answer (no Cache-Control) is not stored: the
	// API key is a credential like Authorization.
	resp, _ := get(t, p.url+"/cached/private", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Its answer marked public is stored, in the tenant's partition.
	resp, _ = get(t, p.url+"/cached/public?cc=public", "X-API-Key", "acme-key")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	gate.policy = critical
	hits := rec.hits.Load()
	resp, body := get(t, p.url+"/cached/public?cc=public")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "anonymous: the plan gate comes before the cache")
	assert.NotContains(t, body, "acme-key")
	resp, _ = get(t, p.url+"/cached/public?cc=public", "X-API-Key", "free-key")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, hits, rec.hits.Load())

	resp, body = get(t, p.url+"/cached/public?cc=public", "X-API-Key", "acme-key")
	assert.Equal(t, "HIT", resp.Header.Get("X-Sentinel-Cache"), "the tenant gets its own entry")
	assert.Equal(t, "data of key acme-key", string(body))
	assert.Equal(t, hits, rec.hits.Load())

	resp, body = get(t, p.url+"/cached/public?cc=public", "X-API-Key", "globex-key")
	assert.Empty(t, resp.Header.Get("X-Sentinel-Cache"), "another tenant misses")
	assert.Equal(t, "data of key globex-key", string(body))
	resp, _ = get(t, p.url+"/cached/private", "X-API-Key", "acme-key")
	assert.Empty(t, resp.Header.Get("X-Sentinel-Cache"), "the private answer was not stored")

	// Cache-only without the plan gate: anonymous requests have their own
	// partition, and an unknown API key is still a credential.
	gate.policy = adaptive.Policy{}
	_, _ = get(t, p.url+"/cached/anon")
	_, _ = get(t, p.url+"/cached/unknown", "X-API-Key", "nobody-key")
	_, _ = get(t, p.url+"/cached/cookie", "Cookie", "session=1")
	gate.policy = adaptive.Policy{CacheOnly: true}
	resp, _ = get(t, p.url+"/cached/anon")
	assert.Equal(t, "HIT", resp.Header.Get("X-Sentinel-Cache"))
	resp, _ = get(t, p.url+"/cached/anon", "X-API-Key", "acme-key")
	assert.Empty(t, resp.Header.Get("X-Sentinel-Cache"), "a tenant does not read the anonymous partition")
	resp, _ = get(t, p.url+"/cached/unknown")
	assert.Empty(t, resp.Header.Get("X-Sentinel-Cache"), "an answer to an API key was not stored")
	resp, _ = get(t, p.url+"/cached/cookie")
	assert.Empty(t, resp.Header.Get("X-Sentinel-Cache"), "an answer to a cookie was not stored")
}

func TestPathRoutingAndForwarding(t *testing.T) {
	rec := startRecorder(t)
	var lim seen
	gate := &fakeGate{}
	p := startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) {
		d.Limiter, d.Adaptive = lim.limiter(), gate
		d.Config.Routes = []Route{
			{PathPrefix: "/", Upstream: "api", Resource: "default"},
			{PathPrefix: "/search", Upstream: "api", Resource: "search", Heavy: true, PathCaseInsensitive: true},
			{PathPrefix: "/Docs", Upstream: "api", Resource: "docs"},
		}
	})
	routed := []struct{ target, resource, forwarded string }{
		{"/search", "search", "/search"},
		{"/SEARCH/x?q=A%2Fb", "search", "/search/x?q=A%2Fb"},
		{"/search;x=1", "search", "/search;x=1"},
		{"/a/../search", "search", "/search"},
		{"//search//x/./y/", "search", "/search/x/y/"},
		{"/%73earch", "search", "/search"},
		{"/x/%7e%41?", "default", "/x/~A"},
		{"/a%2a", "default", "/a%2A"},
		{"/../../search", "search", "/search"},
		{"/docs", "default", "/docs"},
		{"/Docs/a", "docs", "/Docs/a"},
	}
	for _, c := range routed {
		resp, body := rawGet(t, p.url, c.target)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", c.target, body)
		_, res := lim.get()
		assert.Equal(t, c.resource, res, c.target)
		assert.Equal(t, c.forwarded, rec.request().RequestURI, c.target)
	}
	hits := rec.hits.Load()
	for _, target := range []string{
		"/search%20", "/%20search", "/x%5C..%5Csearch", "/x\\..\\search", "/search%00", "/%252e%252e/search",
		"/a/%2e%2e/search", "/a/%2E/search", "/a%2Fsearch", "/search%zz", "/search%4", "/public/..;/search",
		"/.;/search", "/search%7F", "/search%252F",
	} {
		resp, body := rawGet(t, p.url, target)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, target)
		assert.Contains(t, body, `"error":"invalid request path`, target)
		assert.Contains(t, body, `"request_id"`, target)
	}
	assert.Equal(t, hits, rec.hits.Load(), "no refused path reaches the backend")

	// Every spelling of a heavy route is switched off with it.
	gate.policy = adaptive.Policy{Mode: adaptive.Aggressive, HeavyOff: true}
	for _, target := range []string{"/search", "/SEARCH", "/search;x=1", "/x/../search"} {
		resp, _ := rawGet(t, p.url, target, "X-API-Key", "acme-key")
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, target)
	}
}

func TestIdentityHeaders(t *testing.T) {
	rec := startRecorder(t)
	var lim seen
	p := startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) { d.Limiter = lim.limiter() })

	hits := rec.hits.Load()
	resp, body := rawGet(t, p.url, "/", "X-API-Key", "free-key", "X-API-Key", "acme-key")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "API key header appears more than once")
	resp, _ = rawGet(t, p.url, "/", "X-Api-Key", "free-key", "x-api-key", "free-key")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "names compare without case")
	assert.Equal(t, hits, rec.hits.Load())

	// An underscore spelling is neither believed nor forwarded.
	resp, _ = rawGet(t, p.url, "/", "X_API_Key", "acme-key", "X_Custom", "1", "X-Kept", "1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	tenant, _ := lim.get()
	assert.Empty(t, tenant)
	for k := range rec.request().Header {
		assert.NotContains(t, k, "_")
	}
	assert.Equal(t, "1", rec.request().Header.Get("X-Kept"))

	// Client-address headers from an untrusted peer are dropped.
	resp, _ = rawGet(t, p.url, "/", "X-Real-IP", "6.6.6.6", "True-Client-IP", "6.6.6.6", "CF-Connecting-IP", "6.6.6.6",
		"X-Client-IP", "6.6.6.6")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, h := range []string{"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Client-Ip"} {
		assert.Empty(t, rec.request().Header.Values(h), h)
	}

	// An untrusted client's repeated request ID is replaced by one of ours.
	resp, _ = rawGet(t, p.url, "/", "X-Request-Id", "one", "X-Request-Id", "two")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	ids := rec.request().Header.Values("X-Request-Id")
	require.Len(t, ids, 1)
	assert.NotContains(t, []string{"one", "two"}, ids[0])
	assert.Equal(t, ids[0], resp.Header.Get("X-Request-Id"))
}

func TestIdentityHeadersTrustedAndModes(t *testing.T) {
	rec := startRecorder(t)
	p := startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) {
		d.Config.Server.TrustedProxies = []string{"127.0.0.1"}
		d.Config.Server.HeadersWithUnderscores = UnderscoresReject
	})
	resp, body := rawGet(t, p.url, "/", "X-Request-Id", "one", "X-Request-Id", "two")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "a trusted request ID must be unambiguous")
	assert.Contains(t, body, "request ID header appears more than once")
	resp, body = rawGet(t, p.url, "/", "X_Custom", "1")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "server.headers_with_underscores")
	resp, _ = rawGet(t, p.url, "/", "X-Real-IP", "192.0.2.1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "192.0.2.1", rec.request().Header.Get("X-Real-Ip"), "a trusted proxy's are kept")

	p = startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) {
		d.Config.Server.HeadersWithUnderscores = UnderscoresAllow
	})
	resp, _ = rawGet(t, p.url, "/", "X_Custom", "1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "1", rec.request().Header.Get("X_custom"))
}

func TestFraming(t *testing.T) {
	rec := startRecorder(t)
	var lim seen
	p := startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) {
		d.Limiter = lim.limiter()
		d.Config.Routes = []Route{
			{PathPrefix: "/", Upstream: "api", Resource: "default"},
			{PathPrefix: "/", Host: "other.example", Upstream: "api", Resource: "other"},
		}
	})
	hits := rec.hits.Load()
	resp, body := raw(t, p.url, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	assert.NotEmpty(t, resp.Header.Get("Allow"))
	resp, _ = raw(t, p.url, "OPTIONS * HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, _ = raw(t, p.url, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	assert.Equal(t, http.StatusHTTPVersionNotSupported, resp.StatusCode)
	resp, _ = raw(t, p.url, "GET ftp://x/y HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, hits, rec.hits.Load(), "none of these is forwarded")

	// An absolute-form target's host wins, everywhere.
	resp, body = raw(t, p.url, "GET http://other.example/x/../y?q=1 HTTP/1.1\r\nHost: gw.test\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	got := rec.request()
	assert.Equal(t, "other.example", got.Host)
	assert.Equal(t, "other.example", got.Header.Get("X-Forwarded-Host"))
	assert.Equal(t, "/y?q=1", got.RequestURI)
	_, res := lim.get()
	assert.Equal(t, "other", res)

	// Over the read buffer: 414 for the URI, 431 for the headers.
	resp, body = rawGet(t, p.url, "/"+strings.Repeat("a", 5000))
	assert.Equal(t, http.StatusRequestURITooLong, resp.StatusCode)
	assert.Contains(t, body, `"error"`)
	resp, _ = rawGet(t, p.url, "/", "X-Big", strings.Repeat("b", 5000))
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	resp, _ = rawGet(t, p.url, "/", "X-A", strings.Repeat("b", 100), "X-Big", strings.Repeat("b", 5000))
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	// No Content-Type is made up in either direction.
	resp, body = raw(t, p.url, "POST /up HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 5\r\n\r\nhello")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Empty(t, rec.request().Header.Values("Content-Type"), "request")
	assert.Empty(t, resp.Header.Values("Content-Type"), "response")
	resp, _ = raw(t, p.url, "POST /up HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, rec.request().Header.Values("Content-Type"), "streamed request")
	resp, _ = raw(t, p.url, "POST /up HTTP/1.1\r\nHost: gw.test\r\nContent-Type: text/csv\r\nContent-Length: 1\r\n\r\nx")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/csv", rec.request().Header.Get("Content-Type"))
}

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// parseErrors is the counter package parseerr registered for kind.
func parseErrors(kind string) *metrics.Counter {
	return metrics.GetOrCreateCounter(`sentinel_proxy_parse_errors_total{kind="` + kind + `"}`)
}

func TestParseErrorLog(t *testing.T) {
	rec := startRecorder(t)
	var out lockedBuffer
	p := startProxy(t, rec.url, func(d *Deps, _ *upstream.Config) {
		d.Log = slog.New(slog.NewTextHandler(&out, nil))
		d.Config.Server.ParseErrorLogRate = 5
	})
	addr := strings.TrimPrefix(p.url, "http://")

	// A TLS client on the plain port is one short line.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // no server certificate to check
	require.NoError(t, tc.SetDeadline(time.Now().Add(5*time.Second)))
	assert.Error(t, tc.Handshake())
	conn.Close()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "TLS handshake on a plain-HTTP port") },
		5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, strings.Count(out.String(), "\n"), out.String())
	tlsSeen := parseErrors("tls").Get()
	assert.NotZero(t, tlsSeen)

	malformed := parseErrors("malformed").Get()
	for range 200 {
		resp, _ := raw(t, p.url, "GET / HTTP/1.1\r\nHost: gw.test\r\nAuthorization: Bearer top-secret\r\nX-Api-Key: acme-key\r\nBad Header\r\n\r\n")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	}
	assert.EqualValues(t, 200, parseErrors("malformed").Get()-malformed)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "suppressed=") },
		5*time.Second, 10*time.Millisecond, "the dropped lines are summed up")
	log := out.String()
	assert.NotContains(t, log, "top-secret")
	assert.NotContains(t, log, "acme-key")
	assert.NotContains(t, log, "Bad Header")
	assert.Contains(t, log, "malformed mime header")
	assert.Contains(t, log, "peer=")
	// 200 connections in (at most) a few seconds: 5 lines a second and one
	// summary line per second.
	assert.Less(t, strings.Count(log, "\n"), 40, log)
	assert.Less(t, len(log), 8<<10)
}

// A cacheable route holds in memory only answers the cache could keep: a 200
// with a Content-Length within the cache's largest body. A chunked answer is
// passed through as it comes (the client reads its first part while the
// backend is still writing), and one over the bound is passed through whole;
// neither is stored.
func TestCacheableAnswersAreBounded(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	big := bytes.Repeat([]byte("x"), 2<<20) // over 1/64 of the default 64MB cache
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public")
		switch r.URL.Path {
		case "/cached/chunked":
			_, _ = io.WriteString(w, "first;")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "rest")
		case "/cached/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
		default:
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "small")
		}
	}))
	t.Cleanup(up.Close)
	gate := &fakeGate{}
	rc := cache.New(cache.Config{})
	t.Cleanup(rc.Close)
	require.Less(t, rc.MaxBody(), len(big))
	p := startProxy(t, up.URL, func(d *Deps, _ *upstream.Config) { d.Adaptive, d.Cache = gate, rc })

	resp, err := http.Get(p.url + "/cached/chunked")
	require.NoError(t, err)
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		b := make([]byte, len("first;"))
		_, _ = io.ReadFull(resp.Body, b)
		first <- string(b)
	}()
	select {
	case got := <-first:
		assert.Equal(t, "first;", got)
	case <-time.After(3 * time.Second):
		t.Fatal("the chunked answer was held back: the gateway buffered it")
	}
	releaseOnce.Do(func() { close(release) })
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "rest", string(rest))

	r2, body := get(t, p.url+"/cached/big")
	require.Equal(t, http.StatusOK, r2.StatusCode)
	assert.Equal(t, len(big), len(body))
	_, body = get(t, p.url+"/cached/small")
	assert.Equal(t, "small", string(body))

	gate.policy = adaptive.Policy{CacheOnly: true}
	r2, body = get(t, p.url+"/cached/small")
	assert.Equal(t, "HIT", r2.Header.Get("X-Sentinel-Cache"))
	assert.Equal(t, "small", string(body))
	for _, path := range []string{"/cached/chunked", "/cached/big"} {
		r2, _ = get(t, p.url+path)
		assert.Empty(t, r2.Header.Get("X-Sentinel-Cache"), "%s was not stored", path)
	}
	assert.EqualValues(t, 1, rc.Stats().Stores)
}
