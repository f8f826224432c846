package admin

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestRuleTakesTheFileDefaults: a rule written through the API takes the
// limits section's algorithm and window when it leaves them out, as the
// file's rules do, and is answered and stored with them; a token bucket
// without a capacity is told the capacity is missing.
func TestRuleTakesTheFileDefaults(t *testing.T) {
	var lcfg limit.Config
	lcfg.SetDefaults()
	lcfg.Window = 10 * time.Second
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	cat := testTenants(t)
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	sync := catalog.NewSync(nil, cat, catalog.SyncOptions{})
	require.NoError(t, sync.SetPolicyBase(nil, lcfg.CatalogDefaults()), "as the gateway does at start and on reload")
	cfg := Config{Listen: "127.0.0.1:0"}
	cfg.SetDefaults()
	s, err := New(Deps{Config: cfg, Limiter: lim, Catalog: cat, Writer: sync})
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}

	resp := call(t, c, "PUT", "/v1/rules/acme/x", `{"limit":5}`, "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	want := `{"tenant":"acme","resource":"x","algorithm":"sliding_window","limit":5,"window":"10s"}`
	assert.JSONEq(t, want, string(resp.Body()))
	resp = call(t, c, "GET", "/v1/rules/acme/x", "")
	assert.JSONEq(t, want, string(resp.Body()), "stored with the defaults")

	resp = call(t, c, "PUT", "/v1/rules/acme/y", `{"algorithm":"token_bucket","refill_rate":1}`)
	require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), "%s", resp.Body())
	msg, field := problem(t, resp)
	assert.Equal(t, "capacity", field)
	assert.Contains(t, msg, "capacity: missing")
}
