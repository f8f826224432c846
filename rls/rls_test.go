package rls

import (
	"context"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
	"github.com/sentinel-gateway/sentinel/internal/tlsconf/tlstest"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// testLimiter is a limiter on the in-memory store: 5 per second per tenant
// (FREE; PREMIUM gets 15), 3 per second per IP, a rule of 2 per second for
// acme on "search".
func testLimiter(tb testing.TB) (*limit.Limiter, *catalog.Catalog) {
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.Tenant, cfg.IP = 5, 3
	rule := catalog.Rule{Tenant: "acme", Resource: "search", Limit: 2}
	rule.SetDefaults(cfg.CatalogDefaults())
	cat, err := catalog.NewCatalog(nil, []catalog.Tenant{{ID: "acme", Plan: "FREE"}, {ID: "big", Plan: "PREMIUM"}}, []catalog.Rule{rule})
	require.NoError(tb, err)
	lim, err := limit.NewLimiter(cfg, store.NewMemoryStore(store.MemoryOptions{}), limit.Options{Catalog: cat})
	require.NoError(tb, err)
	tb.Cleanup(lim.Close)
	return lim, cat
}

// start serves an rls Server on a free loopback port and returns a client
// connection to it.
func start(tb testing.TB, cfg Config, lim Limiter, cat Catalog, dial ...grpc.DialOption) *grpc.ClientConn {
	cfg.Listen = "127.0.0.1:0"
	cfg.SetDefaults() // as loading the configuration does
	s, err := New(Deps{Config: cfg, Limiter: lim, Catalog: cat})
	require.NoError(tb, err)
	ln, err := net.Listen("tcp", cfg.Listen)
	require.NoError(tb, err)
	go func() { _ = s.Serve(ln) }()
	tb.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(ln.Addr().String(), dial...)
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return conn
}

func descriptor(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func headerMap(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func TestShouldRateLimitTenantFiveThenOverLimit(t *testing.T) {
	lim, cat := testLimiter(t)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{}, lim, cat))
	req := &rlsv3.RateLimitRequest{Domain: "any-domain", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "acme")}}
	overBefore := descOverLimit.Get()
	for i := range 5 {
		resp, err := c.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode, "call %d", i+1)
		st := resp.Statuses[0]
		assert.Equal(t, rlsv3.RateLimitResponse_OK, st.Code)
		assert.Equal(t, uint32(5), st.CurrentLimit.RequestsPerUnit)
		assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_SECOND, st.CurrentLimit.Unit)
		assert.Equal(t, uint32(4-i), st.LimitRemaining)
	}
	resp, err := c.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	st := resp.Statuses[0]
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, st.Code)
	assert.Equal(t, uint32(0), st.LimitRemaining)
	assert.Positive(t, st.DurationUntilReset.AsDuration())
	assert.LessOrEqual(t, st.DurationUntilReset.AsDuration(), 2*time.Second, "a window, plus the lease lifetime at most")
	h := headerMap(resp)
	assert.Equal(t, `"tenant";q=5;w=1`, h["RateLimit-Policy"])
	assert.Equal(t, "0", h["X-RateLimit-Remaining"])
	assert.Contains(t, h["RateLimit"], `"tenant";r=0;t=`)
	assert.Equal(t, overBefore+1, descOverLimit.Get())
}

func TestShouldRateLimitOverallIsTheWorst(t *testing.T) {
	lim, cat := testLimiter(t)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{}, lim, cat))
	// The rule (2/s) on acme/search runs out first; the IP descriptor of
	// another address stays OK; hits_addend 2 takes both permits at once.
	req := &rlsv3.RateLimitRequest{Domain: "mesh", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{
		descriptor("tenant", "acme", "resource", "search"),
		descriptor("remote_address", "10.0.0.1"),
	}}
	resp, err := c.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining, "the rule's 2 permits are taken")
	assert.Equal(t, uint32(2), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, uint32(1), resp.Statuses[1].LimitRemaining)

	req.HitsAddend = 1
	resp, err = c.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, resp.Statuses[0].Code)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.Statuses[1].Code)
	assert.Equal(t, `"rule";q=2;w=1, "tenant";q=5;w=1`, headerMap(resp)["RateLimit-Policy"],
		"headers of the worst descriptor, which list its every limit")

	// A descriptor's own hits_addend wins over the request's.
	req.Descriptors = []*commonv3.RateLimitDescriptor{descriptor("remote_address", "10.0.0.2")}
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(3)
	resp, err = c.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
}

func TestShouldRateLimitNoLimit(t *testing.T) {
	lim, cat := testLimiter(t)
	cfg := Config{Domains: map[string]Domain{"edge": {Tenant: "x-tenant"}}}
	c := rlsv3.NewRateLimitServiceClient(start(t, cfg, lim, cat))
	unknown, noLimit := callsUnknownDomain.Get(), descNoLimit.Get()

	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "other",
		Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "acme")}})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Nil(t, resp.Statuses[0].CurrentLimit)
	assert.Empty(t, resp.ResponseHeadersToAdd)
	assert.Equal(t, unknown+1, callsUnknownDomain.Get())

	// In domain edge the tenant is x-tenant: "tenant" matches nothing.
	resp, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "acme"), descriptor("x-tenant", "acme")}})
	require.NoError(t, err)
	assert.Nil(t, resp.Statuses[0].CurrentLimit)
	require.NotNil(t, resp.Statuses[1].CurrentLimit)
	assert.Equal(t, uint32(5), resp.Statuses[1].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, noLimit+2, descNoLimit.Get())
}

func TestShouldRateLimitInvalidNamesTheField(t *testing.T) {
	lim, cat := testLimiter(t)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{}, lim, cat))
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'a'
	}
	for _, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Domain: "d", HitsAddend: MaxHits + 1, Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "a")}},
			"hits_addend: must be at most 1000000"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "")}},
			"descriptors[0].entries[0].value: missing"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "a"), descriptor("key", string(long))}},
			"descriptors[1].entries[0].value: 300 bytes long"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ten\nant", "a")}},
			"descriptors[0].entries[0].key: contains a control character"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		st, _ := status.FromError(err)
		assert.Equal(t, codes.InvalidArgument, st.Code(), tc.want)
		assert.Contains(t, st.Message(), tc.want)
	}
	// No domain, or no descriptor: refused as envoyproxy/ratelimit refuses
	// them, in every domain.
	for _, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "a")}}, "rate limit domain must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "d"}, "rate limit descriptor list must not be empty"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		st, _ := status.FromError(err)
		assert.Equal(t, codes.Unknown, st.Code(), tc.want)
		assert.Equal(t, tc.want, st.Message())
	}
}

func TestTokenHealthAndReflection(t *testing.T) {
	lim, cat := testLimiter(t)
	conn := start(t, Config{Token: "s3cret"}, lim, cat)
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "acme")}}

	_, err := c.ShouldRateLimit(context.Background(), req)
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	bad := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")
	_, err = c.ShouldRateLimit(bad, req)
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	good := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	resp, err := c.ShouldRateLimit(good, req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)

	// Health needs no token.
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: serviceName})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)

	// Reflection needs it (as documented for grpc.token) and lists the service.
	anon, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	require.NoError(t, err)
	_ = anon.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	_, err = anon.Recv()
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "reflection without the token")
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(good)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	r, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	assert.Contains(t, names, serviceName)
}

func TestTLS(t *testing.T) {
	lim, cat := testLimiter(t)
	pair := tlstest.Write(t, t.TempDir(), "rls")
	creds := credentials.NewClientTLSFromCert(pair.Pool, "127.0.0.1")
	conn := start(t, Config{TLS: tlsconf.Config{CertFile: pair.CertFile, KeyFile: pair.KeyFile}}, lim, cat, grpc.WithTransportCredentials(creds))
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("tenant", "acme")}})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Listen: "nope"}, `grpc.listen: "nope" is not host:port`},
		{Config{Listen: "0.0.0.0:8081"}, "grpc.token: required when grpc.listen"},
		{Config{Listen: "127.0.0.1:8081", TLS: tlsconf.Config{CertFile: "x"}}, "grpc.tls.key_file: missing"},
		{Config{Listen: "127.0.0.1:8081", Domains: map[string]Domain{"edge": {Tenant: "k", Key: "k"}}},
			`grpc.domains.edge.key: entry key "k" is already grpc.domains.edge.tenant`},
	} {
		tc.cfg.SetDefaults()
		assert.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
	ok := Config{Listen: "0.0.0.0:8081", Token: "t"}
	assert.NoError(t, ok.Validate())
	assert.NoError(t, (&Config{}).Validate(), "off")
}

func TestCurrentLimitUnits(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		window time.Duration
		per    uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{5, time.Second, 5, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{5, 2 * time.Second, 150, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{100, time.Minute, 100, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{10, 500 * time.Millisecond, 20, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{7, 48 * time.Hour, 24, rlsv3.RateLimitResponse_RateLimit_WEEK},
		{50, 23 * time.Hour, 50, rlsv3.RateLimitResponse_RateLimit_DAY}, // a day across a clock change
		{50, 7 * 24 * time.Hour, 50, rlsv3.RateLimitResponse_RateLimit_WEEK},
		{50, 28 * 24 * time.Hour, 50, rlsv3.RateLimitResponse_RateLimit_MONTH},
		{50, 31 * 24 * time.Hour, 50, rlsv3.RateLimitResponse_RateLimit_MONTH},
		{50, 366 * 24 * time.Hour, 50, rlsv3.RateLimitResponse_RateLimit_YEAR},
		{50, 2 * 365 * 24 * time.Hour, 25, rlsv3.RateLimitResponse_RateLimit_YEAR},
	} {
		rl := currentLimit(&limit.Decision{Scope: limit.ScopeTenant, Limit: tc.limit, Window: tc.window})
		assert.Equal(t, tc.per, rl.RequestsPerUnit, "%d/%v", tc.limit, tc.window)
		assert.Equal(t, tc.unit, rl.Unit, "%d/%v", tc.limit, tc.window)
	}
	for w, want := range map[time.Duration]string{time.Second: "1s", time.Minute: "1m", 90 * time.Minute: "1h30m",
		time.Hour: "1h", 25 * time.Hour: "25h", 30 * 24 * time.Hour: "30d", 500 * time.Millisecond: "500ms", 0: "0"} {
		assert.Equal(t, want, windowText(w))
	}
}

// TestHitsAddendOverTheLimitIsInvalid: a hits_addend larger than a limit
// that applies can ever grant is InvalidArgument naming the field (the check
// API answers 400 for it), not OVER_LIMIT with a reset that invites a retry;
// and the call takes no tokens from any descriptor.
func TestHitsAddendOverTheLimitIsInvalid(t *testing.T) {
	lim, cat := testLimiter(t)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{}, lim, cat))
	ok := descriptor("tenant", "acme")

	_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*commonv3.RateLimitDescriptor{ok}, HitsAddend: 6})
	st, _ := status.FromError(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	assert.Equal(t, "hits_addend: 6 is over 5, the most the tenant limit can grant at once; it can never pass", st.Message())

	big := descriptor("tenant", "acme")
	big.HitsAddend = wrapperspb.UInt64(6)
	_, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*commonv3.RateLimitDescriptor{ok, big}})
	st, _ = status.FromError(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	assert.Contains(t, st.Message(), "descriptors[1].hits_addend: 6 is over 5")

	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*commonv3.RateLimitDescriptor{ok}, HitsAddend: 5})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode, "the refused calls took nothing: the whole limit is left")
	assert.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
}
