package admin

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// TestResetCounter: DELETE /v1/counters makes a spent budget whole again
// and counts the reset by scope; bad input gets 400 naming the field, an
// unknown scope, tenant or rule 404, a missing token 401.
func TestResetCounter(t *testing.T) {
	c := startAdmin(t, Config{Listen: "127.0.0.1:0", Token: "s3cret"})
	auth := []string{"Authorization", "Bearer s3cret"}
	check := func() bool {
		resp := call(t, c, "POST", "/v1/ratelimit/check", `{"tenant_id":"cheap","resource":"default","key":"u"}`, auth...)
		require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
		return string(resp.Body()[:15]) == `{"allowed":true`
	}
	for check() {
	}
	before := metrics.GetOrCreateCounter(`sentinel_limit_resets_total{scope="tenant"}`).Get()
	var log bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	resp := call(t, c, "DELETE", "/v1/counters?scope=tenant&key=cheap", "", auth...)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	assert.Regexp(t, `msg="admin: counter reset" peer=\S+ scope=tenant key=cheap store_key=\{tenant:cheap\}`, log.String(), "the reset is audited")
	assert.JSONEq(t, `{"scope":"tenant","key":"cheap"}`, string(resp.Body()))
	assert.True(t, check(), "the tenant's budget is whole again")
	assert.Equal(t, before+1, metrics.GetOrCreateCounter(`sentinel_limit_resets_total{scope="tenant"}`).Get())

	for _, tc := range []struct {
		query  string
		status int
		field  string
	}{
		{"", fasthttp.StatusBadRequest, "scope"},
		{"scope=tenant", fasthttp.StatusBadRequest, "key"},
		{"scope=bucket&key=x", fasthttp.StatusNotFound, "scope"},
		{"scope=tenant&key=nobody", fasthttp.StatusNotFound, "key"},
		{"scope=ip&key=10.0.0.300", fasthttp.StatusBadRequest, "key"},
		{"scope=rule&key=cheap", fasthttp.StatusBadRequest, "key"},
		{"scope=rule&key=cheap/none", fasthttp.StatusNotFound, "key"},
		{"scope=api_key&key=a%01b", fasthttp.StatusBadRequest, "key"},
	} {
		resp := call(t, c, "DELETE", "/v1/counters?"+tc.query, "", auth...)
		assert.Equal(t, tc.status, resp.StatusCode(), "%s: %s", tc.query, resp.Body())
		_, field := problem(t, resp)
		assert.Equal(t, tc.field, field, tc.query)
	}
	assert.Equal(t, fasthttp.StatusOK, call(t, c, "DELETE", "/v1/counters?scope=ip&key=::ffff:10.0.0.1", "", auth...).StatusCode())
	assert.Equal(t, fasthttp.StatusUnauthorized, call(t, c, "DELETE", "/v1/counters?scope=ip&key=10.0.0.1", "").StatusCode())
	assert.Equal(t, fasthttp.StatusMethodNotAllowed, call(t, c, "POST", "/v1/counters?scope=ip&key=10.0.0.1", "", auth...).StatusCode())
}
