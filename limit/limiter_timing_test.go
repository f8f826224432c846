package limit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/policy"
	"github.com/sentinel-gateway/sentinel/limit/redistest"
)

// BenchmarkAllowLocal is a decision served from a local lease (IP and
// tenant limits): the request path's cost with the fast path on.
func BenchmarkAllowLocal(b *testing.B) {
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Tenant, c.Window, c.LeaseTTL, c.MaxLease = 1<<39, 1<<39, time.Hour, time.Minute, 1<<19
	})
	l := newTestLimiter(b, cfg, memStore(b), Options{Catalog: testCatalog(b)})
	req := &Request{IP: []byte("10.0.0.1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r"}
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(context.Background(), req)
	}
}

// BenchmarkAllowLocalParallel is BenchmarkAllowLocal from every core.
func BenchmarkAllowLocalParallel(b *testing.B) {
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Tenant, c.Window, c.LeaseTTL, c.MaxLease = 1<<39, 1<<39, time.Hour, time.Minute, 1<<19
	})
	l := newTestLimiter(b, cfg, memStore(b), Options{Catalog: testCatalog(b)})
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		req := &Request{IP: []byte("10.0.0." + strconv.Itoa(int(n.Add(1)))), Tenant: "acme", Plan: "PREMIUM"}
		for pb.Next() {
			l.Allow(context.Background(), req)
		}
	})
}

// BenchmarkAllowRedis asks Redis for every decision (local_fast_path: false).
func BenchmarkAllowRedis(b *testing.B) {
	srv := redistest.Start(b)
	st := newRedisStore(b, srv.Addr)
	f := false
	cfg := testLimitsConfig(func(c *Config) { c.IP = 1 << 39; c.LocalFastPath = &f })
	l := newTestLimiter(b, cfg, st, Options{})
	req := &Request{IP: []byte("10.0.0.1")}
	b.ReportAllocs()
	for b.Loop() {
		l.Allow(context.Background(), req)
	}
	b.ReportMetric(float64(st.calls.Load())/float64(b.N), "store-calls/op")
}

// BenchmarkAllowRedisLeasedHotKey is one hot key with leases over Redis, in
// parallel: store calls per decision show what the leases save.
func BenchmarkAllowRedisLeasedHotKey(b *testing.B) {
	srv := redistest.Start(b)
	st := newRedisStore(b, srv.Addr)
	cfg := testLimitsConfig(func(c *Config) { c.IP = 1 << 39 })
	l := newTestLimiter(b, cfg, st, Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := &Request{IP: []byte("10.0.0.1")}
		for pb.Next() {
			l.Allow(context.Background(), req)
		}
	})
	b.ReportMetric(float64(st.calls.Load())/float64(b.N), "store-calls/op")
}

// BenchmarkAllowRedis10kKeys spreads decisions over 10,000 keys with leases.
func BenchmarkAllowRedis10kKeys(b *testing.B) {
	srv := redistest.Start(b)
	st := newRedisStore(b, srv.Addr)
	cfg := testLimitsConfig(func(c *Config) { c.IP = 1 << 39 })
	l := newTestLimiter(b, cfg, st, Options{})
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = []byte("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		var req Request
		for pb.Next() {
			req.IP = keys[n.Add(1)%int64(len(keys))]
			l.Allow(context.Background(), &req)
		}
	})
	b.ReportMetric(float64(st.calls.Load())/float64(b.N), "store-calls/op")
}

// BenchmarkAllowPolicies is BenchmarkAllowLocal with 0 to 4 policies keyed
// by a header, each decided from a local lease: the difference between
// two steps is what one more policy costs.
func BenchmarkAllowPolicies(b *testing.B) {
	for _, n := range []int{0, 1, 2, 4} {
		b.Run("policies="+strconv.Itoa(n), func(b *testing.B) {
			cfg := testLimitsConfig(func(c *Config) {
				c.IP, c.Tenant, c.Window, c.LeaseTTL, c.MaxLease = 1<<39, 1<<39, time.Hour, time.Minute, 1<<19
			})
			var policies []policy.Config
			for i := range n {
				policies = append(policies, policy.Config{Name: "p" + strconv.Itoa(i), Key: []string{"header:X-User-Id"},
					Limits: []policy.Limit{{Limit: 1 << 39, Window: confutil.Duration(time.Hour)}}})
			}
			ps := withPolicies(b, cfg, policies...)
			l := newTestLimiter(b, cfg, memStore(b), Options{Catalog: testCatalog(b), Policies: ps})
			req := &Request{IP: []byte("10.0.0.1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r",
				Method: []byte("POST"), Attrs: &ptrHeaders{user: []byte("user-1")}}
			b.ReportAllocs()
			for b.Loop() {
				l.Allow(context.Background(), req)
			}
		})
	}
}
