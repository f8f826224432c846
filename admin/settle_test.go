package admin

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/cost"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// costAdmin serves the admin API over a limiter with a token budget per
// key (1,000 a minute; estimate X-Max-Tokens, default 100, at most 400)
// and a failed-login limit (3 a minute per key).
func costAdmin(t *testing.T) (*Server, *fasthttp.Client) {
	var lcfg limit.Config
	lcfg.SetDefaults()
	cat := testTenants(t)
	w := catalog.NewSync(nil, cat, catalog.SyncOptions{})
	minute := confutil.Duration(time.Minute)
	require.NoError(t, w.SetPolicyBase([]catalog.Policy{
		{Name: "tokens", Match: catalog.PolicyMatch{Resources: []string{"chat"}}, Key: []string{"api_key"}, PlanMultiplier: new(bool),
			Limits: []catalog.PolicyLimit{{Limit: 1000, Window: minute, Cost: &cost.Cost{Estimate: cost.Estimate{Header: "X-Max-Tokens", Default: 100, Max: 400}}}}},
		{Name: "failed-logins", Match: catalog.PolicyMatch{Resources: []string{"login"}}, Key: []string{"api_key"}, PlanMultiplier: new(bool),
			Limits: []catalog.PolicyLimit{{Limit: 3, Window: minute, CountIf: &cost.CountIf{Status: cost.Statuses{"401"}}}}},
	}, lcfg.CatalogDefaults()))
	mem := store.NewMemoryStore(store.MemoryOptions{})
	t.Cleanup(mem.Close)
	lim, err := limit.NewLimiter(lcfg, mem, limit.Options{Catalog: cat, Policies: w.PolicySet()})
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	s, err := New(Deps{Config: provisioned(Config{Listen: "127.0.0.1:0"}), Limiter: lim, Catalog: cat, Writer: w})
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s, &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
}

type checkAnswer struct {
	Allowed     bool
	Reservation string
}

func checkJSON(t *testing.T, c *fasthttp.Client, body string) checkAnswer {
	resp := call(t, c, "POST", "/v1/ratelimit/check", body)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	var a checkAnswer
	require.NoError(t, json.Unmarshal(resp.Body(), &a))
	return a
}

// used is what GET /v1/usage says the key k9 used of its token budget.
func used(t *testing.T, c *fasthttp.Client) int64 {
	resp := call(t, c, "GET", "/v1/usage?policy=tokens&key=k9", "")
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	var u struct {
		Limits []struct{ Limit, Used, Remaining int64 }
	}
	require.NoError(t, json.Unmarshal(resp.Body(), &u))
	require.Len(t, u.Limits, 1)
	assert.Equal(t, int64(1000), u.Limits[0].Limit)
	assert.Equal(t, u.Limits[0].Limit, u.Limits[0].Used+u.Limits[0].Remaining)
	return u.Limits[0].Used
}

// TestCheckReservesThenSettles: a check reserves its cost and answers a
// reservation; settling it gives back what the work did not cost, once,
// and the usage API shows what the key spent.
func TestCheckReservesThenSettles(t *testing.T) {
	_, c := costAdmin(t)
	chat := `{"tenant_id":"acme","resource":"chat","key":"k9","headers":{"X-Max-Tokens":"400"}}`
	a := checkJSON(t, c, chat)
	require.True(t, a.Allowed)
	require.Len(t, a.Reservation, 32)
	assert.Equal(t, int64(400), used(t, c), "the estimate, reserved")
	resp := call(t, c, "POST", "/v1/ratelimit/settle", `{"reservation":"`+a.Reservation+`","cost":120}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	assert.JSONEq(t, `{"reservation":"`+a.Reservation+`","limits":[{"name":"tokens","reserved":400,"settled":120}]}`, string(resp.Body()))
	assert.Equal(t, int64(120), used(t, c), "what it cost")
	resp = call(t, c, "POST", "/v1/ratelimit/settle", `{"reservation":"`+a.Reservation+`","cost":1}`)
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode(), "settled once")

	b := checkJSON(t, c, `{"tenant_id":"acme","resource":"chat","key":"k9","cost":50}`)
	require.True(t, b.Allowed)
	resp = call(t, c, "POST", "/v1/ratelimit/settle", `{"reservation":"`+b.Reservation+`","cost":900}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	assert.Equal(t, int64(1000), used(t, c), "1,020 spent: overdrawn")
	assert.False(t, checkJSON(t, c, `{"tenant_id":"acme","resource":"chat","key":"k9","cost":1}`).Allowed)
	assert.Empty(t, checkJSON(t, c, `{"tenant_id":"acme","resource":"other","key":"k9"}`).Reservation, "no cost limit applies")
}

// TestReservationExpiresAtItsEstimate: a reservation nobody settles
// within its TTL settles at its estimate, and cannot be settled after.
func TestReservationExpiresAtItsEstimate(t *testing.T) {
	s, c := costAdmin(t)
	a := checkJSON(t, c, `{"tenant_id":"acme","resource":"chat","key":"k9","cost":300,"reservation_ttl":"30s"}`)
	require.True(t, a.Allowed)
	s.res.expire(time.Now().Add(29 * time.Second))
	s.res.mu.Lock()
	_, open := s.res.m[a.Reservation]
	s.res.mu.Unlock()
	require.True(t, open, "open until its TTL")
	expired := reservationsExpired.Get()
	s.res.expire(time.Now().Add(31 * time.Second))
	assert.Equal(t, expired+1, reservationsExpired.Get(), "settled at its TTL")
	assert.Equal(t, int64(300), used(t, c), "at its estimate")
	resp := call(t, c, "POST", "/v1/ratelimit/settle", `{"reservation":"`+a.Reservation+`","cost":1}`)
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode())
}

// TestCheckSettlesFailedLogins: a count_if limit counts only the answers
// whose status the settlement names among its statuses.
func TestCheckSettlesFailedLogins(t *testing.T) {
	_, c := costAdmin(t)
	login := func(status int) bool {
		a := checkJSON(t, c, `{"tenant_id":"acme","resource":"login","key":"u1"}`)
		if !a.Allowed {
			return false
		}
		resp := call(t, c, "POST", "/v1/ratelimit/settle", `{"reservation":"`+a.Reservation+`","status":`+jsonInt(status)+`}`)
		require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
		return true
	}
	for range 10 {
		require.True(t, login(200))
	}
	for range 3 {
		require.True(t, login(401))
	}
	assert.False(t, login(200), "three failures: refused")
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestSettleRejectsBadInput: 400 naming the field.
func TestSettleRejectsBadInput(t *testing.T) {
	_, c := costAdmin(t)
	for body, field := range map[string]string{
		`{}`:                             "reservation",
		`{"reservation":"x","cost":-1}`:  "cost",
		`{"reservation":"x","status":9}`: "status",
		`{"reservation":"x","extra":1}`:  "extra",
	} {
		resp := call(t, c, "POST", "/v1/ratelimit/settle", body)
		assert.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode(), body)
		assert.Contains(t, string(resp.Body()), field, body)
	}
	resp := call(t, c, "POST", "/v1/ratelimit/check", `{"tenant_id":"acme","resource":"chat","reservation_ttl":"2h"}`)
	assert.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode())
	assert.Contains(t, string(resp.Body()), "reservation_ttl")
	resp = call(t, c, "GET", "/v1/usage?policy=nope&key=k9", "")
	assert.Equal(t, fasthttp.StatusNotFound, resp.StatusCode())
}

// TestPolicyAPICostLimits: the policies API takes cost and count_if as the
// file does, and answers them back as they apply.
func TestPolicyAPICostLimits(t *testing.T) {
	_, c := costAdmin(t)
	body := `{"key":["api_key"],"limits":[{"limit":500,"window":"1m","cost":{"estimate":{"json":"max_tokens","default":50,"max":200},"actual":{"sse":"usage.total_tokens"}}},` +
		`{"limit":5,"window":"1m","count_if":{"status":[401,"5xx"]}}]}`
	resp := call(t, c, "PUT", "/v1/policies/api-tokens", body)
	require.Equal(t, fasthttp.StatusCreated, resp.StatusCode(), "%s", resp.Body())
	var got struct {
		Limits []struct {
			Cost    *cost.Cost
			CountIf *cost.CountIf `json:"count_if"`
		}
	}
	require.NoError(t, json.Unmarshal(resp.Body(), &got), "%s", resp.Body())
	require.Len(t, got.Limits, 2)
	assert.Equal(t, &cost.Cost{Estimate: cost.Estimate{JSON: "max_tokens", Default: 50, Max: 200}, Actual: cost.Actual{SSE: "usage.total_tokens"}}, got.Limits[0].Cost)
	assert.Equal(t, cost.Statuses{"401", "5xx"}, got.Limits[1].CountIf.Status)
	resp = call(t, c, "PUT", "/v1/policies/bad-tokens", `{"key":["api_key"],"limits":[{"limit":5,"cost":{"estimate":{"fixed":1,"header":"X"}}}]}`)
	assert.Equal(t, fasthttp.StatusBadRequest, resp.StatusCode())
	assert.Contains(t, string(resp.Body()), "limits[0].cost.estimate")
}

// TestCheckAcquiresAndReleasesASlot: a check that a concurrency limit
// applies to holds a slot until its reservation is settled (released) or
// its reservation_ttl ends.
func TestCheckAcquiresAndReleasesASlot(t *testing.T) {
	s, c := costAdmin(t)
	put := call(t, c, "PUT", "/v1/policies/exports", `{"match":{"resources":["exports"]},"key":["api_key"],"plan_multiplier":false,"limits":[{"concurrency":1}]}`)
	require.Equal(t, fasthttp.StatusCreated, put.StatusCode(), "%s", put.Body())
	export := `{"tenant_id":"acme","resource":"exports","key":"k9","reservation_ttl":"10s"}`
	a := checkJSON(t, c, export)
	require.True(t, a.Allowed)
	require.NotEmpty(t, a.Reservation)
	assert.False(t, checkJSON(t, c, export).Allowed, "the one slot is held")
	resp := call(t, c, "GET", "/v1/usage?policy=exports&key=k9", "")
	assert.Contains(t, string(resp.Body()), `"used":1`)
	resp = call(t, c, "POST", "/v1/ratelimit/settle", `{"reservation":"`+a.Reservation+`"}`)
	require.Equal(t, fasthttp.StatusOK, resp.StatusCode(), "%s", resp.Body())
	b := checkJSON(t, c, export)
	require.True(t, b.Allowed, "released")
	s.res.expire(time.Now().Add(11 * time.Second))
	assert.True(t, checkJSON(t, c, export).Allowed, "released at its reservation_ttl")
}
