package admin

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// BenchmarkCheckAPIRedis is the check API over loopback HTTP with the real
// limiter on one redis-server: decisions per second and p99, leases on.
func BenchmarkCheckAPIRedis(b *testing.B) {
	srv := redistest.Start(b)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.Tenant, cfg.APIKey = 1<<39, 1<<39
	cfg.StoreTimeout = 50 * time.Millisecond
	cat := testTenants(b)
	lim, err := limit.NewLimiter(cfg, store.NewRedisStore(client, store.RedisStoreOptions{KeyPrefix: "bench"}), limit.Options{Catalog: cat})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(lim.Close)
	a, err := New(Deps{Config: provisioned(Config{Listen: "127.0.0.1:0"}), Limiter: lim, Catalog: cat, Writer: catalog.NewSync(nil, cat, catalog.SyncOptions{})})
	require.NoError(b, err)
	hc := &fasthttp.HostClient{Addr: serveLoopback(b, a), MaxConns: 64}
	var mu sync.Mutex
	var lats []time.Duration
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + hc.Addr + "/v1/ratelimit/check")
		req.Header.SetMethod("POST")
		req.SetBodyString(`{"tenant_id":"acme","resource":"default","key":"user-1","tokens_requested":1}`)
		var local []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("%v %d %s", err, resp.StatusCode(), resp.Body())
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
