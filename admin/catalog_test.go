package admin

import (
	"context"
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

// TestRuleRoundTrip: the rules API reads and answers catalog.Rule's JSON, with
// the window as text, and names the field of a bad window.
func TestRuleRoundTrip(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	resp := call(t, c, "PUT", "/v1/rules/acme/bids", `{"algorithm":"sliding_window","limit":5,"window":"1m30s"}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	want := `{"tenant":"acme","resource":"bids","algorithm":"sliding_window","limit":5,"window":"1m30s"}`
	assert.JSONEq(t, want, string(resp.Body()))
	resp = call(t, c, "GET", "/v1/rules/acme/bids", "")
	assert.JSONEq(t, want, string(resp.Body()))
	resp = call(t, c, "GET", "/v1/rules", "")
	assert.JSONEq(t, `{"rules":[`+want+`]}`, string(resp.Body()))

	for body, wantMsg := range map[string]string{
		`{"algorithm":"sliding_window","limit":5,"window":"fast"}`: `window: want a duration such as 10s or 1m, got string "fast"`,
		`{"algorithm":"sliding_window","limit":5,"window":60}`:     `window: want a duration such as 10s or 1m, got number 60`,
		`{"algorithm":"sliding_window","limit":5}`:                 `window: required for sliding_window (a duration such as 1s)`,
	} {
		resp = call(t, c, "PUT", "/v1/rules/acme/bids", body)
		require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), body)
		msg, field := problem(t, resp)
		assert.Equal(t, "window", field, body)
		assert.Equal(t, wantMsg, msg, body)
	}
}

// TestEnumFieldsNameTheField: the algorithm and the plan decode from their
// names; a bad name is answered in the configuration's words, with the
// field, and a missing one as before.
func TestEnumFieldsNameTheField(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	for _, tc := range []struct{ path, body, field, msg string }{
		{"/v1/rules/acme/bids", `{"algorithm":"leaky","limit":5,"window":"1s"}`, "algorithm",
			`algorithm: "leaky" is not one of sliding_window, sliding_log, token_bucket`},
		{"/v1/rules/acme/bids", `{"limit":5,"window":"1s"}`, "algorithm",
			`algorithm: "" is not one of sliding_window, sliding_log, token_bucket`},
		{"/v1/rules/acme/bids", `{"algorithm":5,"limit":5,"window":"1s"}`, "algorithm", `algorithm: want a string, got number`},
		{"/v1/tenants/newco", `{"plan":"free","api_keys":["k"]}`, "plan", `plan: "free" is not one of FREE, STANDARD, PREMIUM`},
		{"/v1/tenants/newco", `{"api_keys":["k"]}`, "plan", `plan: "" is not one of FREE, STANDARD, PREMIUM`},
	} {
		resp := call(t, c, "PUT", tc.path, tc.body)
		require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), tc.body)
		msg, field := problem(t, resp)
		assert.Equal(t, tc.field, field, tc.body)
		assert.Equal(t, tc.msg, msg, tc.body)
	}
	resp := call(t, c, "PUT", "/v1/tenants/newco", `{"plan":"STANDARD","api_keys":["k"]}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	assert.JSONEq(t, `{"id":"newco","plan":"STANDARD","api_keys":["k"]}`, string(resp.Body()))
}

// TestDeleteConfigEntryNamesTheField: deleting a rule or tenant of the
// configuration file answers 409 naming the file's key that holds it.
func TestDeleteConfigEntryNamesTheField(t *testing.T) {
	var lcfg limit.Config
	lcfg.SetDefaults()
	rule := catalog.Rule{Tenant: "acme", Resource: "bids", Limit: 5}
	rule.SetDefaults(lcfg.CatalogDefaults())
	cat, err := catalog.NewCatalog(nil, []catalog.Tenant{{ID: "acme", Plan: "FREE"}}, []catalog.Rule{rule})
	require.NoError(t, err)
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	s, err := New(Deps{Config: provisioned(Config{Listen: "127.0.0.1:0"}), Limiter: lim, Catalog: cat, Writer: catalog.NewSync(nil, cat, catalog.SyncOptions{})})
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}

	for path, want := range map[string][2]string{
		"/v1/rules/acme/bids": {"rules", "rules: the rule for tenant acme and resource bids comes from the configuration file: override it with PUT, or remove it from the file and reload"},
		"/v1/tenants/acme":    {"tenants", "tenants: tenant acme comes from the configuration file: override it with PUT, or remove it from the file and reload"},
	} {
		resp := call(t, c, "DELETE", path, "")
		require.Equal(t, fasthttp.StatusConflict, resp.StatusCode(), "%s: %s", path, resp.Body())
		msg, field := problem(t, resp)
		assert.Equal(t, want[0], field, path)
		assert.Equal(t, want[1], msg, path)
	}
}

// TestFormBodyIs415: a body that is not JSON, sent as an HTML form (or any
// other declared format), answers 415 naming Content-Type on every endpoint
// that reads a body; JSON sent with curl -d's default form Content-Type is
// read, and a body without a declared format that is not JSON stays a 400.
func TestFormBodyIs415(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	form := "application/x-www-form-urlencoded"
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/ratelimit/check", "tenant_id=acme&resource=default"},
		{"POST", "/v1/ratelimit/check/batch", "checks=1"},
		{"PUT", "/v1/rules/acme/bids", "limit=5&window=1m"},
		{"PUT", "/v1/tenants/newco", "plan=FREE"},
	} {
		resp := call(t, c, tc.method, tc.path, tc.body, "Content-Type", form)
		require.Equal(t, fasthttp.StatusUnsupportedMediaType, resp.StatusCode(), "%s %s: %s", tc.method, tc.path, resp.Body())
		msg, field := problem(t, resp)
		assert.Equal(t, "Content-Type", field)
		assert.Equal(t, "Content-Type: application/x-www-form-urlencoded is not read; send a JSON object (Content-Type: application/json)", msg)
		resp = call(t, c, tc.method, tc.path, "<x/>", "Content-Type", "application/xml; charset=utf-8")
		assert.Equal(t, fasthttp.StatusUnsupportedMediaType, resp.StatusCode(), "%s %s as XML", tc.method, tc.path)
		resp = call(t, c, tc.method, tc.path, tc.body, "Content-Type", "text/plain")
		assert.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), "%s %s as text", tc.method, tc.path)
	}
	resp := call(t, c, "POST", "/v1/ratelimit/check", `{"tenant_id":"acme","resource":"default"}`, "Content-Type", form)
	assert.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "JSON with curl -d's Content-Type: %s", resp.Body())
}

// TestBrokenJSONWithFormTypeSaysWhy: a body that looks like JSON but is
// broken answers the JSON's mistake whatever its Content-Type, as it does
// with application/json: curl -d sends the form type, and 415 would point
// away from the mistake.
func TestBrokenJSONWithFormTypeSaysWhy(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0"})
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/ratelimit/check", `{"tenant_id":"acme","resource":"def`},
		{"POST", "/v1/ratelimit/check/batch", ` [{"tenant_id":"acme"`},
		{"PUT", "/v1/rules/acme/bids", `{"limit":5,`},
		{"PUT", "/v1/tenants/newco", `{"plan":`},
	} {
		var want [2]string
		for i, ct := range []string{"application/json", "application/x-www-form-urlencoded"} {
			resp := call(t, c, tc.method, tc.path, tc.body, "Content-Type", ct)
			require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), "%s %s as %s: %s", tc.method, tc.path, ct, resp.Body())
			msg, field := problem(t, resp)
			if i == 0 {
				want = [2]string{msg, field}
				continue
			}
			assert.Equal(t, want, [2]string{msg, field}, "%s %s: the same answer as with application/json", tc.method, tc.path)
		}
		assert.Equal(t, "body", want[1])
	}
}
