package limit

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
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

// BenchmarkAllowRefusedLocal is a refusal from a key's cached refusal (a
// tenant over its limit of 99 a second, the benchmark's refusal row): what
// each request of a flood costs the limiter.
func BenchmarkAllowRefusedLocal(b *testing.B) {
	cfg := testLimitsConfig(func(c *Config) {
		c.Tenant, c.APIKey, c.IP = 99, 0, 0
	})
	l := newTestLimiter(b, cfg, memStore(b), Options{Catalog: testCatalog(b)})
	req := &Request{IP: []byte("10.0.0.1"), APIKey: []byte("k"), Tenant: "acme", Plan: "PREMIUM", Resource: "r"}
	for range 10000 {
		l.Allow(context.Background(), req)
	}
	if d := l.Allow(context.Background(), req); d.Allowed {
		b.Fatalf("not refused: %+v", d)
	}
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
			var policies []catalog.Policy
			for i := range n {
				policies = append(policies, catalog.Policy{Name: "p" + strconv.Itoa(i), Key: []string{"header:X-User-Id"},
					Limits: []catalog.PolicyLimit{{Limit: 1 << 39, Window: confutil.Duration(time.Hour)}}})
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

// BenchmarkAllowRedisCheck10k is the check API's 10k-key load
// (bench/check_10k.lua) on the limiter alone: every decision takes the
// tenant's limit (one hot key) and the API key's (one of 10k, picked at
// random), over Redis, from 64 callers. It reports the store calls per
// decision (lease calls, and the calls that only return permits), the
// returns and used reports that ride on a lease call, and Redis' CPU
// per script run (INFO commandstats).
func BenchmarkAllowRedisCheck10k(b *testing.B) {
	srv := redistest.Start(b)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	st := &classifyingStore{Store: store.NewRedisStore(client, store.RedisStoreOptions{KeyPrefix: "t"})}
	cfg := testLimitsConfig(func(c *Config) {
		c.Tenant, c.APIKey, c.IP = 1e9, 1e9, 1e9
	})
	l := newTestLimiter(b, cfg, st, Options{Catalog: testCatalog(b)})
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = []byte("k" + strconv.Itoa(i))
	}
	calls0, usec0 := redisScriptStats(b, client)
	hits0, skipped0, late0 := localHits.Get(), storeCallsSkipped.Get(), storeCallsTimeout.Get()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		req := Request{Tenant: "acme", Plan: "PREMIUM", Resource: "default"}
		for pb.Next() {
			req.APIKey = keys[rng.IntN(len(keys))]
			l.Allow(context.Background(), &req)
		}
	})
	b.StopTimer()
	calls, usec := redisScriptStats(b, client)
	n := float64(b.N)
	b.ReportMetric(float64(st.leases.Load())/n, "leases/op")
	b.ReportMetric(float64(st.returns.Load())/n, "returns/op")
	b.ReportMetric(float64(st.riding.Load())/n, "riding-returns/op")
	b.ReportMetric(float64(st.used.Load())/n, "used-reports/op")
	b.ReportMetric(float64(st.big.Load())/n, "tenant-calls/op")
	b.ReportMetric(float64(st.wants.Load())/float64(max(st.big.Load(), 1)), "tenant-want")
	b.ReportMetric(float64(calls-calls0)/n, "redis-calls/op")
	b.ReportMetric(float64(localHits.Get()-hits0)/n, "local-hits/op")
	b.ReportMetric(float64(storeCallsSkipped.Get()-skipped0+storeCallsTimeout.Get()-late0)/n, "unanswered/op")
	b.ReportMetric(float64(usec-usec0)/float64(max(calls-calls0, 1)), "redis-µs/call")
}

// classifyingStore counts a store's calls by what they carry.
type classifyingStore struct {
	store.Store
	leases, returns, riding, used atomic.Int64
	big, wants                    atomic.Int64 // the tenant's calls, and their wants
}

func (c *classifyingStore) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	switch {
	case req.Want == 0 && req.Return > 0:
		c.returns.Add(1)
	case req.Return > 0:
		c.leases.Add(1)
		c.riding.Add(1)
	default:
		c.leases.Add(1)
	}
	if req.Used > 0 {
		c.used.Add(1)
	}
	if !bytes.Contains(req.Key, []byte("{k")) && !bytes.Contains(req.Key, []byte(":k")) {
		c.big.Add(1)
		c.wants.Add(req.Want)
	}
	return c.Store.Lease(ctx, req)
}

// redisScriptStats reads the calls and microseconds of EVALSHA from INFO
// commandstats.
func redisScriptStats(b *testing.B, client rueidis.Client) (calls, usec int64) {
	info, err := client.Do(context.Background(), client.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(b, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(strings.TrimSpace(rest), ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls = n
				case "usec":
					usec = n
				}
			}
		}
	}
	return calls, usec
}
