package admin

import (
	"context"
	"encoding/json"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestCheckDecidesPolicies: the check API passes method, headers and query
// to the policies: 2 bids per X-User-Id, keyed also by a query parameter.
func TestCheckDecidesPolicies(t *testing.T) {
	var lcfg limit.Config
	lcfg.SetDefaults()
	cat := testTenants(t)
	ps, err := catalog.CompilePolicies([]catalog.Policy{{
		Name: "bids-per-user", Match: catalog.PolicyMatch{Methods: []string{"POST"}, Headers: map[string]string{"X-Env": "prod"}},
		Key: []string{"header:X-User-Id", "query:region"}, Limits: []catalog.PolicyLimit{{Limit: 2}},
	}}, lcfg.CatalogDefaults())
	require.NoError(t, err)
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat, Policies: ps})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	s, err := New(Deps{Config: Config{Listen: "127.0.0.1:0"}, Limiter: lim, Catalog: cat, Writer: catalog.NewSync(nil, cat, catalog.SyncOptions{})})
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}

	check := func(body string) (allowed bool) {
		resp := call(t, c, "POST", "/v1/ratelimit/check", body)
		require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
		var d struct{ Allowed bool }
		require.NoError(t, json.Unmarshal(resp.Body(), &d))
		return d.Allowed
	}
	bid := `{"tenant_id":"acme","resource":"bids","method":"POST","headers":{"x-env":"prod","X-User-Id":"u1"},"query":{"region":"eu"}}`
	assert.True(t, check(bid))
	assert.True(t, check(bid))
	assert.False(t, check(bid), "the third bid of u1 in eu")
	assert.True(t, check(`{"tenant_id":"acme","resource":"bids","method":"POST","headers":{"X-Env":"prod","X-User-Id":"u1"},"query":{"region":"us"}}`))
	assert.True(t, check(`{"tenant_id":"acme","resource":"bids","method":"GET","headers":{"X-Env":"prod","X-User-Id":"u1"},"query":{"region":"eu"}}`), "GET does not match")
}
