package admin

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// testTenants is a catalog of two tenants, acme (PREMIUM) and cheap (FREE),
// without rules; it is also the catalog writer of the tests.
func testTenants(tb testing.TB) *catalog.Catalog {
	acme := catalog.Tenant{ID: "acme", Plan: "PREMIUM", APIKeys: []string{"acme-key"}}
	cheap := catalog.Tenant{ID: "cheap", Plan: "FREE", APIKeys: []string{"free-key"}}
	cat, err := catalog.NewCatalog(nil, []catalog.Tenant{acme, cheap}, nil)
	require.NoError(tb, err)
	return cat
}

// serveLoopback serves s on a free loopback port until the test ends and
// returns its address.
func serveLoopback(tb testing.TB, s *Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	go func() { _ = s.Serve(ln) }()
	tb.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return ln.Addr().String()
}

// startAdmin serves an admin Server with an in-memory limiter on an
// in-memory listener and returns a client for it.
func startAdmin(t *testing.T, cfg Config) *fasthttp.Client {
	t.Helper()
	var lcfg limit.Config
	lcfg.SetDefaults()
	lcfg.Tenant = 3
	s := memServer(t, cfg, lcfg)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
}

// memServer is an admin Server on testTenants with a limiter of lcfg on the
// in-memory store.
func memServer(tb testing.TB, cfg Config, lcfg limit.Config) *Server {
	tb.Helper()
	mem := store.NewMemoryStore(store.MemoryOptions{})
	tb.Cleanup(func() { mem.Close() })
	cat := testTenants(tb)
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat})
	require.NoError(tb, err)
	tb.Cleanup(lim.Close)
	cfg.SetDefaults() // as loading the configuration does
	s, err := New(Deps{Config: cfg, Limiter: lim, Catalog: cat, Writer: catalog.NewSync(nil, cat, catalog.SyncOptions{})})
	require.NoError(tb, err)
	return s
}

// provisioned fills c's defaults, as loading the configuration does before
// New sees the section.
func provisioned(c Config) Config {
	c.SetDefaults()
	return c
}

// call sends one request; headers are name, value pairs.
func call(t *testing.T, c *fasthttp.Client, method, path, body string, headers ...string) *fasthttp.Response {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), new(fasthttp.Response)
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://admin" + path)
	req.Header.SetMethod(method)
	req.SetBodyString(body)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	require.NoError(t, c.Do(req, resp))
	return resp
}

// problem decodes an error answer and checks its shape.
func problem(t *testing.T, resp *fasthttp.Response) (msg, field string) {
	t.Helper()
	var p struct{ Error, Field string }
	require.NoError(t, json.Unmarshal(resp.Body(), &p), "%s", resp.Body())
	assert.Equal(t, "application/json", string(resp.Header.ContentType()))
	return p.Error, p.Field
}

func TestConfigRefusesAnExposedListenerWithoutToken(t *testing.T) {
	cat := testTenants(t)
	exposed := Config{Listen: "0.0.0.0:9090"}
	exposed.SetDefaults()
	err := exposed.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "server.admin_token: required")
	_, err = New(Deps{Catalog: cat, Writer: catalog.NewSync(nil, cat, catalog.SyncOptions{})})
	assert.EqualError(t, err, "admin: New needs a limiter")
}

// TestRouterAnswers: unknown paths, wrong methods and missing tokens get
// the JSON problem body naming the field; the token is not asked on the
// probes /healthz and /readyz, nor on /metrics, unless configured.
func TestRouterAnswers(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0", Token: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}

	resp := call(t, c, "GET", "/v1/rules", "")
	assert.Equal(t, fasthttp.StatusUnauthorized, resp.StatusCode())
	assert.Equal(t, `Bearer realm="sentinel-admin"`, string(resp.Header.Peek("WWW-Authenticate")))
	msg, field := problem(t, resp)
	assert.Equal(t, "authorization: missing or wrong bearer token", msg)
	assert.Equal(t, "authorization", field)

	resp = call(t, c, "GET", "/v1/nothing%22%5C%01%FF", "", auth...)
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode())
	assert.True(t, utf8.Valid(resp.Body()), "%q", resp.Body())
	msg, field = problem(t, resp)
	assert.Equal(t, "path: no admin endpoint /v1/nothing\"\\ \uFFFD", msg)
	assert.Equal(t, "path", field)

	resp = call(t, c, "POST", "/v1/rules", "", auth...)
	assert.Equal(t, fasthttp.StatusMethodNotAllowed, resp.StatusCode())
	assert.Equal(t, "GET", string(resp.Header.Peek("Allow")))
	msg, _ = problem(t, resp)
	assert.Equal(t, "method: POST is not allowed; use GET", msg)

	assert.Equal(t, fasthttp.StatusOK, call(t, c, "GET", "/healthz", "").StatusCode())
	assert.Equal(t, fasthttp.StatusOK, call(t, c, "GET", "/metrics", "").StatusCode())
	assert.Equal(t, fasthttp.StatusOK, call(t, c, "GET", "/readyz", "").StatusCode())
	assert.Equal(t, fasthttp.StatusUnauthorized, call(t, c, "POST", "/v1/reload", "").StatusCode())

	c = startAdmin(t, Config{Listen: "127.0.0.1:0", Token: "s3cret", MetricsRequireToken: true, ProbesRequireToken: true})
	assert.Equal(t, fasthttp.StatusUnauthorized, call(t, c, "GET", "/metrics", "").StatusCode())
	assert.Equal(t, fasthttp.StatusUnauthorized, call(t, c, "GET", "/healthz", "").StatusCode())
	assert.Equal(t, fasthttp.StatusUnauthorized, call(t, c, "GET", "/readyz", "").StatusCode())
	assert.Equal(t, fasthttp.StatusOK, call(t, c, "GET", "/readyz", "", auth...).StatusCode())
}

// TestCheckAnswer: a check answers the decision as JSON with the
// rate-limit headers, and a bad one names its field.
func TestCheckAnswer(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	resp := call(t, c, "POST", "/v1/ratelimit/check", `{"tenant_id":"acme","resource":"default","tokens_requested":2}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	var d struct {
		Allowed   bool  `json:"allowed"`
		Remaining int64 `json:"remaining"`
		Limit     int64 `json:"limit"`
	}
	require.NoError(t, json.Unmarshal(resp.Body(), &d))
	assert.True(t, d.Allowed)
	assert.Equal(t, string(resp.Header.Peek("X-RateLimit-Limit")), strconv.FormatInt(d.Limit, 10))
	assert.Equal(t, string(resp.Header.Peek("X-RateLimit-Remaining")), strconv.FormatInt(d.Remaining, 10))
	assert.NotEmpty(t, resp.Header.Peek("RateLimit-Policy"))

	resp = call(t, c, "POST", "/v1/ratelimit/check", `{"tenant_id":"a\u0001","resource":"r"}`)
	require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode())
	msg, field := problem(t, resp)
	assert.Equal(t, "tenant_id: contains a control character", msg)
	assert.Equal(t, "tenant_id", field)
}

// TestCheckPeek: tokens_requested 0 answers every limit that applies and
// takes nothing.
func TestCheckPeek(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	check := func(body string) string {
		resp := call(t, c, "POST", "/v1/ratelimit/check", body)
		require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
		return string(resp.Body())
	}
	peek := `{"tenant_id":"acme","resource":"default","key":"u1","tokens_requested":0}`
	// PREMIUM (×3) of limits.tenant 3: 9; limits.api_key and ip are off.
	want := `{"allowed":true,"remaining":9,"retry_after_ms":0,"limit":9,"reset_ms":0,` +
		`"limits":[{"name":"tenant","limit":9,"remaining":9,"reset_ms":0,"window_ms":1000}]}` + "\n"
	assert.Equal(t, want, check(peek))
	assert.Equal(t, want, check(peek), "a peek takes nothing")
	assert.Contains(t, check(`{"tenant_id":"acme","resource":"default","key":"u1","tokens_requested":9}`), `"allowed":true`)
	var d struct {
		Allowed      bool  `json:"allowed"`
		Remaining    int64 `json:"remaining"`
		RetryAfterMS int64 `json:"retry_after_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(check(peek)), &d))
	assert.Equal(t, false, d.Allowed, "not one more")
	assert.Equal(t, int64(0), d.Remaining)
	assert.Positive(t, d.RetryAfterMS)
}

// TestState shows the limiter's status and, when wired, the adaptive state.
func TestState(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	resp := call(t, c, "GET", "/v1/state", "")
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode())
	var st map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(resp.Body(), &st))
	assert.Contains(t, st, "limiter")
	assert.NotContains(t, st, "adaptive", "no adaptive layer wired")
}
