package e2e

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// TestCheckAPIAllOrNothing: a check for more tokens than remain is refused
// and takes nothing; a check for more than a limit can ever grant is a 400
// naming tokens_requested, not a refusal, and is not counted.
func TestCheckAPIAllOrNothing(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, `
limits: {ip: 0, check_resources: [logged, bucket]}
rules:
  - {tenant: hot, resource: default, algorithm: sliding_window, limit: 100, window: 10s}
  - {tenant: hot, resource: logged, algorithm: sliding_log, limit: 5000, window: 10s}
  - {tenant: hot, resource: bucket, algorithm: token_bucket, capacity: 20, refill_rate: 1}
`))
	check := func(resource string, tokens int) harness.Answer {
		t.Helper()
		body := `{"tenant_id":"hot","resource":"` + resource + `","key":"k","tokens_requested":` + strconv.Itoa(tokens) + `}`
		return harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", body)
	}
	for _, tc := range []struct {
		resource string
		tokens   int
	}{{"default", 150}, {"default", 101}, {"logged", 1001}, {"bucket", 21}} {
		a := check(tc.resource, tc.tokens)
		require.Equal(t, http.StatusBadRequest, a.Status, "%s %d: %s", tc.resource, tc.tokens, a.Body)
		assert.Equal(t, "tokens_requested", a.JSON(t)["field"])
	}
	a := check("default", 60)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	require.Equal(t, true, a.JSON(t)["allowed"])
	a = check("default", 50)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	assert.Equal(t, false, a.JSON(t)["allowed"], "50 of the 40 left")
	a = check("default", 40)
	assert.Equal(t, true, a.JSON(t)["allowed"], "the refused check took part of the budget: %s", a.Body)
	assert.EqualValues(t, 0, a.JSON(t)["remaining"])

	a = check("logged", 1000)
	assert.Equal(t, true, a.JSON(t)["allowed"], "%s", a.Body)
	a = check("bucket", 20)
	assert.Equal(t, true, a.JSON(t)["allowed"], "%s", a.Body)

	b := harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check/batch",
		`{"checks":[{"tenant_id":"hot","resource":"default","key":"k"},{"tenant_id":"hot","resource":"default","key":"k","tokens_requested":500}]}`)
	require.Equal(t, http.StatusBadRequest, b.Status, "%s", b.Body)
	assert.Equal(t, "checks[1].tokens_requested", b.JSON(t)["field"])
}

// TestRuleBounds: rule values past the documented bounds are 400s naming
// the field.
func TestRuleBounds(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, "limits: {ip: 0}\n"))
	for body, field := range map[string]string{
		`{"algorithm":"token_bucket","capacity":5,"refill_rate":1e-300}`:           "refill_rate",
		`{"algorithm":"token_bucket","capacity":1000000000000,"refill_rate":1}`:    "refill_rate",
		`{"algorithm":"token_bucket","capacity":1000000000001,"refill_rate":1e6}`:  "capacity",
		`{"algorithm":"sliding_window","limit":9223372036854775807,"window":"1s"}`: "limit",
		`{"algorithm":"sliding_log","limit":10,"window":"25h"}`:                    "window",
	} {
		a := harness.Do(t, "PUT", g.Admin+"/v1/rules/hot/edge", body)
		require.Equal(t, http.StatusBadRequest, a.Status, "%s: %s", body, a.Body)
		assert.Equal(t, field, a.JSON(t)["field"], "%s: %s", body, a.Body)
	}
	a := harness.Do(t, "PUT", g.Admin+"/v1/rules/hot/edge", `{"algorithm":"token_bucket","capacity":1,"refill_rate":0.000001}`)
	assert.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
}
