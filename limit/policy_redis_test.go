package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestPolicyQuotaThreePods offers a calendar quota of 200 a year, keyed by a
// header, far more than that through three pods with their own Redis
// clients: together they approve no more than 200, and nearly all of
// them (a lease's unused permits go back).
func TestPolicyQuotaThreePods(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		quotaThreePods(t, []string{redistest.Start(t).Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		quotaThreePods(t, redistest.StartCluster(t).Addrs)
	})
}

func quotaThreePods(t *testing.T, addrs []string) {
	const quota = 200
	cfg := testLimitsConfig(func(c *Config) { c.StoreTimeout = 100 * time.Millisecond })
	ps := withPolicies(t, cfg, catalog.Policy{Name: "yearly", Key: []string{"header:X-User-Id"},
		Limits: []catalog.PolicyLimit{{Limit: 1000, Window: confutil.Duration(time.Second)}, {Limit: quota, Period: store.Year}}})
	var pods []*Limiter
	for range 3 {
		cl, err := store.NewRedisClient(store.RedisConfig{Addrs: addrs})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		pods = append(pods, newTestLimiter(t, cfg, &countingStore{Store: store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: "q"})},
			Options{LivePods: func() int { return 3 }, Catalog: testCatalog(t), Policies: ps}))
	}
	req := &Request{Attrs: headers{"X-User-Id": "u1"}}
	var allowed, quotaRefusals atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < 2*time.Second; i++ {
				d := pods[(w+i)%3].Allow(context.Background(), req)
				switch {
				case d.Allowed:
					allowed.Add(1)
				case d.Limit == quota:
					quotaRefusals.Add(1)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d approved of a quota of %d; %d refused by the quota", allowed.Load(), quota, quotaRefusals.Load())
	assert.LessOrEqual(t, allowed.Load(), int64(quota), "the pods approved more than the quota")
	assert.GreaterOrEqual(t, allowed.Load(), int64(quota*9/10), "less of the quota approved than expected")
	assert.Positive(t, quotaRefusals.Load(), "the quota refused")
}

// TestPolicyOnRedis decides policies on one Redis and on a cluster: the
// bids example's two limits, each key attribute making a budget of its
// own, matches, and exemptions.
func TestPolicyOnRedis(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		policiesOn(t, []string{redistest.Start(t).Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		policiesOn(t, redistest.StartCluster(t).Addrs)
	})
}

// attrs is Attrs over headers and query parameters.
type attrs struct{ h, q map[string]string }

func (a attrs) Header(n []byte) []byte { return []byte(a.h[string(n)]) }
func (a attrs) Query(n []byte) []byte  { return []byte(a.q[string(n)]) }

func policiesOn(t *testing.T, addrs []string) {
	cl, err := store.NewRedisClient(store.RedisConfig{Addrs: addrs})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	st := store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: "pol"})
	cfg := testLimitsConfig(func(c *Config) { c.IP, c.IPScope = 1000, IPScopeAnonymous })
	bids := bidsPolicy(10, 25)
	bids.Limits[0].Window = confutil.Duration(200 * time.Millisecond)
	no := false
	ps := withPolicies(t, cfg, bids,
		catalog.Policy{Name: "every-attr", Match: catalog.PolicyMatch{Hosts: []string{"api.example.com"}, Headers: map[string]string{"X-Env": "*"}, Anonymous: &no},
			Key:    []string{"ip", "ip/24", "ip/64", "api_key", "tenant", "plan", "resource", "method", "path", "header:X-User-Id", "query:page"},
			Limits: []catalog.PolicyLimit{{Limit: 1, Window: confutil.Duration(time.Hour)}}, PlanMultiplier: &no,
			Unlimited: catalog.Unlimited{CIDRs: []string{"10.20.0.0/16"}}})
	l := newTestLimiter(t, cfg, &countingStore{Store: st}, Options{Catalog: testCatalog(t), Policies: ps})
	ctx := context.Background()

	bid := &Request{IP: []byte("192.0.2.1"), Resource: "bids", Method: []byte("POST"), Attrs: headers{"X-User-Id": "u1"}}
	for i := range 10 {
		require.True(t, l.Allow(ctx, bid).Allowed, "bid %d", i)
	}
	d := l.Allow(ctx, bid)
	require.False(t, d.Allowed, "the 11th within the window")
	assert.Equal(t, int64(10), d.Limit)
	passed := 10
	for range 4 {
		time.Sleep(220 * time.Millisecond)
		for l.Allow(ctx, bid).Allowed {
			passed++
		}
	}
	assert.Equal(t, 25, passed, "the day's quota")
	d = l.Allow(ctx, bid)
	assert.Equal(t, int64(25), d.Limit, "refused by the quota")
	assert.True(t, l.Allow(ctx, &Request{Resource: "bids", Method: []byte("POST"), Attrs: headers{"X-User-Id": "monitoring-bot"}}).Allowed)

	base := func() *Request {
		return &Request{IP: []byte("192.0.2.7"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r",
			Method: []byte("GET"), Host: []byte("api.example.com:8443"), Path: []byte("/a"),
			Attrs: attrs{h: map[string]string{"X-Env": "prod", "X-User-Id": "u1"}, q: map[string]string{"page": "1"}}}
	}
	require.True(t, l.Allow(ctx, base()).Allowed)
	require.False(t, l.Allow(ctx, base()).Allowed, "one an hour")
	for name, change := range map[string]func(r *Request){
		"ip (and its /24)": func(r *Request) { r.IP = []byte("192.0.3.7") },
		"api_key":          func(r *Request) { r.APIKey = []byte("k9") },
		"tenant":           func(r *Request) { r.Tenant = "other" },
		"plan":             func(r *Request) { r.Plan = "FREE" },
		"resource":         func(r *Request) { r.Resource = "r2" },
		"method":           func(r *Request) { r.Method = []byte("PUT") },
		"path":             func(r *Request) { r.Path = []byte("/b") },
		"header":           func(r *Request) { r.Attrs.(attrs).h["X-User-Id"] = "u2" },
		"query":            func(r *Request) { r.Attrs.(attrs).q["page"] = "2" },
	} {
		r := base()
		change(r)
		assert.True(t, l.Allow(ctx, r).Allowed, "%s: a budget of its own", name)
		assert.False(t, l.Allow(ctx, r).Allowed, "%s: counted", name)
	}
	for name, change := range map[string]func(r *Request){
		"another host": func(r *Request) { r.Host = []byte("other.example.com") },
		"no X-Env":     func(r *Request) { delete(r.Attrs.(attrs).h, "X-Env") },
		"anonymous":    func(r *Request) { r.APIKey, r.Tenant = nil, "" },
		"exempt CIDR":  func(r *Request) { r.IP = []byte("10.20.1.1") },
		"no X-User-Id": func(r *Request) { delete(r.Attrs.(attrs).h, "X-User-Id") },
	} {
		r := base()
		change(r)
		for range 3 {
			assert.True(t, l.Allow(ctx, r).Allowed, "%s: the policy does not count it", name)
		}
	}
}

// TestPolicyStoreFailure: while Redis is down, a policy limit is held to
// the pod's share, as the other limits are (on_store_failure: local).
func TestPolicyStoreFailure(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv.Addr)
	cfg := testLimitsConfig(func(c *Config) {
		c.Window, c.StoreTimeout, c.BreakerFailures, c.BreakerCooldown = time.Hour, 50*time.Millisecond, 2, 100*time.Millisecond
	})
	ps := withPolicies(t, cfg, catalog.Policy{Name: "per-user", Key: []string{"header:X-User-Id"}, Limits: []catalog.PolicyLimit{{Limit: 10}}})
	l := newTestLimiter(t, cfg, st, Options{LivePods: func() int { return 2 }, Policies: ps})
	ctx := context.Background()
	require.True(t, l.Allow(ctx, &Request{Attrs: headers{"X-User-Id": "warm"}}).Allowed)
	srv.Stop()
	allowed := 0
	for range 20 {
		if l.Allow(ctx, &Request{Attrs: headers{"X-User-Id": "fresh"}}).Allowed {
			allowed++
		}
	}
	assert.False(t, l.StoreHealthy(), "the breaker opens")
	assert.Equal(t, 5, allowed, "each of 2 pods enforces half of the policy's limit")
}
