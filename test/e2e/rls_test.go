package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// envoy is a gRPC client as Envoy's rate limit filter is one: it sends
// ShouldRateLimit for the descriptors its rate_limits actions build.
type envoy struct{ c rlsv3.RateLimitServiceClient }

func dialEnvoy(t *testing.T, g *harness.Gateway) envoy {
	t.Helper()
	require.NotEmpty(t, g.GRPCAddr(), "grpc.listen is on")
	conn, err := grpc.NewClient(g.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return envoy{rlsv3.NewRateLimitServiceClient(conn)}
}

// check asks for one descriptor and returns its status and the overall code.
func (e envoy) check(t *testing.T, kv ...string) (*rlsv3.RateLimitResponse_DescriptorStatus, rlsv3.RateLimitResponse_Code) {
	t.Helper()
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	resp, err := e.c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, 1)
	return resp.Statuses[0], resp.OverallCode
}

// TestEnvoyRateLimitServiceSharesTheBudget: two gateways on one
// redis-server; a rule of 5 per minute for (gold, default) is one budget for
// Envoy's gRPC calls, proxied requests and check API calls on either pod.
func TestEnvoyRateLimitServiceSharesTheBudget(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf(`
redis: {addrs: [%q]}
limits: {ip: 0, tenant: 1000, store_timeout: 1s} # a slow call under -race must not fall back to local shares
rules:
  - {tenant: gold, resource: default, limit: 5, window: 1m}
grpc: {listen: "127.0.0.1:0"}
`, srv.Addr))
	a, b := harness.Start(t, cfg), harness.Start(t, cfg)
	ea, eb := dialEnvoy(t, a), dialEnvoy(t, b)
	desc := []string{"tenant", "gold", "resource", "default"}
	over0 := harness.Scrape(t, b.Admin, "sentinel_rls_descriptors_total", "decision", "over_limit")
	ok0 := harness.Scrape(t, b.Admin, "sentinel_rls_requests_total", "result", "ok")

	st, code := ea.check(t, desc...)
	require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, uint32(5), st.CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, st.CurrentLimit.Unit)
	assert.Equal(t, uint32(4), st.LimitRemaining)
	_, code = eb.check(t, desc...)
	require.Equal(t, rlsv3.RateLimitResponse_OK, code, "2nd: gRPC on pod B")
	require.Equal(t, http.StatusOK, harness.Do(t, "GET", a.URL+"/x", "", "X-API-Key", "gold-key").Status, "3rd: proxy on pod A")
	chk := harness.Do(t, "POST", b.Admin+"/v1/ratelimit/check", `{"tenant_id":"gold","resource":"default"}`)
	require.Equal(t, true, chk.JSON(t)["allowed"], "4th: check API on pod B")
	st, code = ea.check(t, desc...)
	require.Equal(t, rlsv3.RateLimitResponse_OK, code, "5th: gRPC on pod A")
	assert.Equal(t, uint32(0), st.LimitRemaining)

	st, code = eb.check(t, desc...)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, code, "6th: over the shared budget")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, st.Code)
	assert.Positive(t, st.DurationUntilReset.AsDuration())
	assert.Equal(t, http.StatusTooManyRequests, harness.Do(t, "GET", b.URL+"/x", "", "X-API-Key", "gold-key").Status)
	chk = harness.Do(t, "POST", a.Admin+"/v1/ratelimit/check", `{"tenant_id":"gold","resource":"default"}`)
	assert.Equal(t, false, chk.JSON(t)["allowed"])

	// Every decision is in /metrics.
	// (Both pods run in this process: their counters are one.)
	assert.Equal(t, 1.0, harness.Scrape(t, b.Admin, "sentinel_rls_descriptors_total", "decision", "over_limit")-over0)
	assert.Equal(t, 3.0, harness.Scrape(t, a.Admin, "sentinel_rls_requests_total", "result", "ok")-ok0)
}
