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

const policyToken = "Bearer s3cret"

// startPolicyAdmin serves the admin API with the token s3cret over the
// in-memory store, with the file policy per-ip (10 a second per client
// IP); await leaves the sync waiting for a Redis that never comes.
func startPolicyAdmin(t *testing.T, await bool) *fasthttp.Client {
	t.Helper()
	var lcfg limit.Config
	lcfg.SetDefaults()
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(func() { mem.Close() })
	cat := testTenants(t)
	w := catalog.NewSync(nil, cat, catalog.SyncOptions{})
	file := catalog.Policy{Name: "per-ip", Key: []string{"ip"}, Limits: []catalog.PolicyLimit{{Limit: 10}}}
	require.NoError(t, w.SetPolicyBase([]catalog.Policy{file}, lcfg.CatalogDefaults()))
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat, Policies: w.PolicySet()})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	if await {
		w.Await()
	}
	s, err := New(Deps{Config: Config{Listen: "127.0.0.1:0", Token: "s3cret"}, Limiter: lim, Catalog: cat, Writer: w})
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
}

// TestPoliciesAPI: every answer of the policies API, and a policy written
// through it deciding the check API's requests at once (no Redis: the
// process's catalog).
func TestPoliciesAPI(t *testing.T) {
	c := startPolicyAdmin(t, false)
	auth := []string{"Authorization", policyToken}
	body := `{"match":{"resources":["default"]},"key":["tenant"],"limits":[{"limit":2,"window":"1m"},{"limit":100,"period":"day"}]}`

	resp := call(t, c, "PUT", "/v1/policies/tenant-daily", body)
	require.Equal(t, fasthttp.StatusUnauthorized, resp.StatusCode(), "no token")
	resp = call(t, c, "PUT", "/v1/policies/tenant-daily", body, auth...)
	require.Equal(t, fasthttp.StatusCreated, resp.StatusCode(), "%s", resp.Body())
	want := `{"name":"tenant-daily","match":{"resources":["default"]},"key":["tenant"],
		"limits":[{"limit":2,"window":"1m","algorithm":"sliding_window"},{"limit":100,"period":"day"}],
		"unlimited":{},"origin":"api"}`
	assert.JSONEq(t, want, string(resp.Body()), "the stored policy has the default algorithm filled in")
	resp = call(t, c, "GET", "/v1/policies/tenant-daily", "", auth...)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode())
	assert.JSONEq(t, want, string(resp.Body()))
	resp = call(t, c, "PUT", "/v1/policies/tenant-daily", `{"name":"tenant-daily",`+body[1:], auth...)
	assert.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "a replace: %s", resp.Body())

	var list struct{ Policies []catalog.PolicyEntry }
	resp = call(t, c, "GET", "/v1/policies", "", auth...)
	require.NoError(t, json.Unmarshal(resp.Body(), &list))
	require.Len(t, list.Policies, 2)
	assert.Equal(t, [2]string{"per-ip", catalog.OriginFile}, [2]string{list.Policies[0].Name, list.Policies[0].Origin})
	assert.Equal(t, [2]string{"tenant-daily", catalog.OriginAPI}, [2]string{list.Policies[1].Name, list.Policies[1].Origin})

	// The policy decides at once: 2 a minute for cheap (FREE: multiplier 1).
	check := `{"tenant_id":"cheap","resource":"default"}`
	allowed := []bool{}
	for range 3 {
		var d struct{ Allowed bool }
		require.NoError(t, json.Unmarshal(call(t, c, "POST", "/v1/ratelimit/check", check, auth...).Body(), &d))
		allowed = append(allowed, d.Allowed)
	}
	assert.Equal(t, []bool{true, true, false}, allowed)

	resp = call(t, c, "DELETE", "/v1/policies/tenant-daily", "", auth...)
	assert.Equal(t, fasthttp.StatusNoContent, resp.StatusCode())
	resp = call(t, c, "GET", "/v1/policies/tenant-daily", "", auth...)
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode())
	resp = call(t, c, "DELETE", "/v1/policies/tenant-daily", "", auth...)
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode())
	var d struct{ Allowed bool }
	require.NoError(t, json.Unmarshal(call(t, c, "POST", "/v1/ratelimit/check", check, auth...).Body(), &d))
	assert.True(t, d.Allowed, "deleted: the policy no longer limits")
}

// TestPoliciesAPIBadInput: bad bodies answer 400 naming the field, in the
// words of the file's checks.
func TestPoliciesAPIBadInput(t *testing.T) {
	c := startPolicyAdmin(t, false)
	auth := []string{"Authorization", policyToken}
	for _, tc := range []struct{ path, body, field, msg string }{
		{"/v1/policies/p", `{"key":["ip"],"limits":[{"limit":5},{"limit":9,"period":"fortnight"}]}`,
			"limits[1].period", `"fortnight" is not one of hour, day, week, month, year`},
		{"/v1/policies/p", `{"key":["colour"],"limits":[{"limit":5}]}`, "key[0]", `"colour" is not one of ip`},
		{"/v1/policies/p", `{"key":["ip"]}`, "limits", "required"},
		{"/v1/policies/p", `{"key":["ip"],"limits":[{"limit":5,"window":"soon"}]}`, "limits[0].window", "want a duration"},
		{"/v1/policies/p", `{"key":["ip"],"limits":[{"limit":5}],"colour":1}`, "colour", "unknown field"},
		{"/v1/policies/p", `{"name":"q","key":["ip"],"limits":[{"limit":5}]}`, "name", "must match the path"},
		{"/v1/policies/a:b", `{"key":["ip"],"limits":[{"limit":5}]}`, "name", "may only contain"},
		{"/v1/policies/p", `{"key":["ip"],"limits":[{"limit":5}],"unlimited":{"cidrs":["10.0.0.0/99"]}}`, "unlimited.cidrs[0]", "not a CIDR"},
	} {
		resp := call(t, c, "PUT", tc.path, tc.body, auth...)
		require.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), "%s: %s", tc.body, resp.Body())
		msg, field := problem(t, resp)
		assert.Equal(t, tc.field, field, tc.body)
		assert.Contains(t, msg, tc.msg, tc.body)
	}
	resp := call(t, c, "PUT", "/v1/policies/p", `{"key":["ip"],"limits":[{"limit":5},{"limit":9,"period":"fortnight"}]}`, auth...)
	msg, _ := problem(t, resp)
	assert.Equal(t, `limits[1].period: "fortnight" is not one of hour, day, week, month, year`, msg)
	resp = call(t, c, "GET", "/v1/policies/p", "", auth...)
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode(), "nothing was stored")
}

// TestPoliciesAPIFileEntries: an API policy overrides the file's of its
// name, and deleting it brings the file's back; the file's alone cannot be
// deleted (409 naming the file's key).
func TestPoliciesAPIFileEntries(t *testing.T) {
	c := startPolicyAdmin(t, false)
	auth := []string{"Authorization", policyToken}
	resp := call(t, c, "DELETE", "/v1/policies/per-ip", "", auth...)
	require.Equal(t, fasthttp.StatusConflict, resp.StatusCode())
	msg, field := problem(t, resp)
	assert.Equal(t, "policies", field)
	assert.Equal(t, "policies: policy per-ip comes from the configuration file: override it with PUT, or remove it from the file and reload", msg)

	resp = call(t, c, "PUT", "/v1/policies/per-ip", `{"key":["ip"],"limits":[{"limit":99}]}`, auth...)
	require.Equal(t, fasthttp.StatusCreated, resp.StatusCode(), "%s", resp.Body())
	resp = call(t, c, "GET", "/v1/policies/per-ip", "", auth...)
	assert.Contains(t, string(resp.Body()), `"origin":"api"`)
	assert.Contains(t, string(resp.Body()), `"limit":99`)
	resp = call(t, c, "DELETE", "/v1/policies/per-ip", "", auth...)
	require.Equal(t, fasthttp.StatusNoContent, resp.StatusCode())
	resp = call(t, c, "GET", "/v1/policies/per-ip", "", auth...)
	assert.Contains(t, string(resp.Body()), `"origin":"file"`)
	assert.Contains(t, string(resp.Body()), `"limit":10`)
}

// TestPoliciesAPIWithoutRedisYet: writes answer 503 while the sync waits
// for its Redis, reads answer.
func TestPoliciesAPIWithoutRedisYet(t *testing.T) {
	c := startPolicyAdmin(t, true)
	auth := []string{"Authorization", policyToken}
	resp := call(t, c, "PUT", "/v1/policies/p", `{"key":["ip"],"limits":[{"limit":5}]}`, auth...)
	assert.Equal(t, fasthttp.StatusServiceUnavailable, resp.StatusCode(), "%s", resp.Body())
	resp = call(t, c, "GET", "/v1/policies", "", auth...)
	assert.Equal(t, fasthttp.StatusOK, resp.StatusCode())
	resp = call(t, c, "POST", "/v1/policies", "", auth...)
	assert.Equal(t, fasthttp.StatusMethodNotAllowed, resp.StatusCode())
}
