package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// policyAdmin serves the admin API over a limiter that decides with the
// writer's policies, the file's being policies.
func policyAdmin(t *testing.T, policies ...catalog.Policy) *fasthttp.Client {
	var lcfg limit.Config
	lcfg.SetDefaults()
	cat := testTenants(t)
	w := catalog.NewSync(nil, cat, catalog.SyncOptions{})
	require.NoError(t, w.SetPolicyBase(policies, lcfg.CatalogDefaults()))
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat, Policies: w.PolicySet()})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	s, err := New(Deps{Config: provisioned(Config{Listen: "127.0.0.1:0", Token: "s3cret"}), Limiter: lim, Catalog: cat, Writer: w})
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
}

// TestResetPolicyCounter: DELETE /v1/counters?policy= makes every limit
// of a policy whole for one identity, its values given in the key's order,
// audits and counts it; another identity keeps its counts. A policy of the
// API is found as the file's are; bad input gets 400 naming the
// parameter, an unknown policy 404.
func TestResetPolicyCounter(t *testing.T) {
	c := policyAdmin(t, catalog.Policy{Name: "bids-per-user", Key: []string{"header:X-User-Id", "query:region"},
		Limits: []catalog.PolicyLimit{{Limit: 3, Window: confutil.Duration(time.Minute)}, {Limit: 2, Period: store.Day}}})
	auth := []string{"Authorization", "Bearer s3cret"}
	check := func(user, region string) bool {
		body := `{"tenant_id":"acme","resource":"bids","headers":{"X-User-Id":"` + user + `"},"query":{"region":"` + region + `"}}`
		resp := call(t, c, "POST", "/v1/ratelimit/check", body, auth...)
		require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
		var d struct{ Allowed bool }
		require.NoError(t, json.Unmarshal(resp.Body(), &d))
		return d.Allowed
	}
	for check("u1", "eu") || check("u2", "eu") {
	}
	before := metrics.GetOrCreateCounter(`sentinel_limit_resets_total{scope="policy"}`).Get()
	var log bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	resp := call(t, c, "DELETE", "/v1/counters?policy=bids-per-user&key=u1&key=eu", "", auth...)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	assert.JSONEq(t, `{"policy":"bids-per-user","key":["u1","eu"],"limits":["1m","day"]}`, string(resp.Body()))
	assert.Regexp(t, `msg="admin: counter reset" peer=\S+ policy=bids-per-user key="\[u1 eu\]" `+
		`store_keys="\[\{pol:bids-per-user:1m0s:u1:eu\} \{pol:bids-per-user:day:u1:eu\}\]"`, log.String(), "the reset is audited")
	assert.Equal(t, before+1, metrics.GetOrCreateCounter(`sentinel_limit_resets_total{scope="policy"}`).Get())
	assert.True(t, check("u1", "eu"), "u1 in eu is whole again")
	assert.True(t, check("u1", "eu"), "both limits: the day's quota of 2 too")
	assert.False(t, check("u1", "eu"))
	assert.False(t, check("u2", "eu"), "u2 keeps its counts")

	resp = call(t, c, "PUT", "/v1/policies/per-subnet", `{"key":["ip/24"],"limits":[{"limit":1}]}`, auth...)
	require.Equal(t, fasthttp.StatusCreated, resp.StatusCode(), "%s", resp.Body())
	resp = call(t, c, "DELETE", "/v1/counters?policy=per-subnet&key=10.0.0.0/24", "", auth...)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	assert.JSONEq(t, `{"policy":"per-subnet","key":["10.0.0.0/24"],"limits":["1s"]}`, string(resp.Body()))

	for _, tc := range []struct {
		query  string
		status int
		field  string
	}{
		{"policy=&key=u1", fasthttp.StatusBadRequest, "policy"},
		{"policy=nope&key=u1", fasthttp.StatusNotFound, "policy"},
		{"policy=bids-per-user&scope=ip&key=10.0.0.1", fasthttp.StatusBadRequest, "policy"},
		{"policy=bids-per-user", fasthttp.StatusBadRequest, "key"},
		{"policy=bids-per-user&key=u1", fasthttp.StatusBadRequest, "key"},
		{"policy=bids-per-user&key=u1&key=", fasthttp.StatusBadRequest, "key"},
		{"policy=bids-per-user&key=u1&key=e%01u", fasthttp.StatusBadRequest, "key"},
		{"policy=per-subnet&key=10.0.0.300", fasthttp.StatusBadRequest, "key"},
		{"policy=per-subnet&key=10.0.0.0/16", fasthttp.StatusBadRequest, "key"},
	} {
		resp := call(t, c, "DELETE", "/v1/counters?"+tc.query, "", auth...)
		assert.Equal(t, tc.status, resp.StatusCode(), "%s: %s", tc.query, resp.Body())
		_, field := problem(t, resp)
		assert.Equal(t, tc.field, field, tc.query)
	}
	resp = call(t, c, "DELETE", "/v1/counters?policy=bids-per-user&key=u1", "", auth...)
	msg, _ := problem(t, resp)
	assert.Contains(t, msg, `policy "bids-per-user" has 2 key attributes (header:X-User-Id, query:region), got 1 values`)

	series := `sentinel_limit_policy_decisions_total{policy="per-subnet",limit="1s",decision="allowed"}`
	assert.Contains(t, string(call(t, c, "GET", "/metrics", "", auth...).Body()), series)
	require.Equal(t, fasthttp.StatusNoContent, call(t, c, "DELETE", "/v1/policies/per-subnet", "", auth...).StatusCode())
	assert.NotContains(t, string(call(t, c, "GET", "/metrics", "", auth...).Body()), series, "a deleted policy's series go")
	assert.Equal(t, fasthttp.StatusNotFound, call(t, c, "DELETE", "/v1/counters?policy=per-subnet&key=10.0.0.1", "", auth...).StatusCode(),
		"a deleted policy is gone")
	assert.Equal(t, fasthttp.StatusUnauthorized, call(t, c, "DELETE", "/v1/counters?policy=bids-per-user&key=u1&key=eu", "").StatusCode())
}
