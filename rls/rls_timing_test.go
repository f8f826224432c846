package rls

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// BenchmarkShouldRateLimitRedis is Envoy's ShouldRateLimit over loopback
// gRPC with the real limiter on one redis-server, leases on: decisions per
// second and p99, on one hot descriptor and spread over 10k descriptors
// (10k tenants). The limits are high enough never to refuse.
func BenchmarkShouldRateLimitRedis(b *testing.B) {
	srv := redistest.Start(b)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.Tenant = 1 << 39
	cfg.StoreTimeout = 50 * time.Millisecond
	cat, err := catalog.NewCatalog(nil, nil, nil)
	require.NoError(b, err)
	lim, err := limit.NewLimiter(cfg, store.NewRedisStore(client, store.RedisStoreOptions{KeyPrefix: "bench"}), limit.Options{Catalog: cat})
	require.NoError(b, err)
	b.Cleanup(lim.Close)
	conn := benchServer(b, lim, cat)
	for _, bc := range []struct {
		name string
		keys int
	}{{"hot", 1}, {"10k", 10_000}} {
		b.Run(bc.name, func(b *testing.B) {
			reqs := make([]*rlsv3.RateLimitRequest, bc.keys)
			for i := range reqs {
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
					Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t-" + strconv.Itoa(i)}},
				}}}
			}
			benchCalls(b, rlsv3.NewRateLimitServiceClient(conn), reqs)
		})
	}
}

func benchServer(b *testing.B, lim Limiter, cat Catalog) *grpc.ClientConn {
	cfg := Config{Listen: "127.0.0.1:0"}
	cfg.SetDefaults() // as loading the configuration does
	s, err := New(Deps{Config: cfg, Limiter: lim, Catalog: cat})
	require.NoError(b, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	return conn
}

// benchCalls sends reqs round robin from parallel callers on one HTTP/2
// connection, as Envoy does, and reports decisions/s and p99.
func benchCalls(b *testing.B, c rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest) {
	var mu sync.Mutex
	var lats []time.Duration
	var next atomic.Uint64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var local []time.Duration
		for pb.Next() {
			req := reqs[next.Add(1)%uint64(len(reqs))]
			t0 := time.Now()
			resp, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Errorf("%v %v", err, resp)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lats = append(lats, local...)
		mu.Unlock()
	})
	el := time.Since(start)
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	if len(lats) > 0 {
		b.ReportMetric(float64(len(lats))/el.Seconds(), "decisions/s")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkShouldRateLimitFiles is the service's own cost for one call of
// an envoyproxy/ratelimit file's hot descriptor, in process (no gRPC),
// decided from a local lease on the in-memory store: what the Envoy
// service adds to gRPC's work for each call of make bench-rls's hot row.
func BenchmarkShouldRateLimitFiles(b *testing.B) {
	srv := hotFilesServer(b)
	req := hotFilesRequest(1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := srv.svc.ShouldRateLimit(ctx, req)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
	}
}

// hotFilesServer is a service of one envoyproxy/ratelimit file whose
// descriptors of key hot (any value) have a limit no test reaches, on the
// in-memory store.
func hotFilesServer(tb testing.TB) *Server {
	path := filepath.Join(tb.TempDir(), "bench.yaml")
	require.NoError(tb, os.WriteFile(path, []byte("domain: bench\ndescriptors:\n  - key: hot\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"), 0o600))
	lim, cat := memLimiter(tb)
	var rc Config
	rc.ConfigFiles = []string{path}
	srv, err := New(Deps{Config: rc, Limiter: lim, Catalog: cat})
	require.NoError(tb, err)
	return srv
}

// hotFilesRequest is a call of n hot descriptors (values 1 to n).
func hotFilesRequest(n int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "bench"}
	for i := range n {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "hot", Value: strconv.Itoa(i + 1)}},
		})
	}
	return req
}
