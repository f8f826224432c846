package limit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *testClock) add(d time.Duration) { c.set(c.now().Add(d)) }

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
}

// headers is Attrs over a map of canonical header names.
type headers map[string]string

func (h headers) Header(n []byte) []byte { return []byte(h[string(n)]) }
func (h headers) Query([]byte) []byte    { return nil }

// withPolicies compiles policies under the defaults of cfg.
func withPolicies(t testing.TB, cfg Config, policies ...catalog.Policy) *catalog.PolicySet {
	t.Helper()
	ps, err := catalog.CompilePolicies(policies, cfg.CatalogDefaults())
	require.NoError(t, err)
	return ps
}

// bidsPolicy is the documentation's example: per X-User-Id on POST bids,
// perSecond a second and perDay a day.
func bidsPolicy(perSecond, perDay int64) catalog.Policy {
	return catalog.Policy{
		Name:  "bids-per-user",
		Match: catalog.PolicyMatch{Resources: []string{"bids"}, Methods: []string{"POST"}},
		Key:   []string{"header:X-User-Id"},
		Limits: []catalog.PolicyLimit{
			{Limit: perSecond, Window: confutil.Duration(time.Second)},
			{Limit: perDay, Period: store.Day},
		},
		Unlimited: catalog.Unlimited{Values: []string{"monitoring-bot"}},
	}
}

func TestPolicyTwoLimitsAllOrNothing(t *testing.T) {
	clock := &testClock{at: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	mem := store.NewMemoryStore(store.MemoryOptions{Now: clock.now})
	t.Cleanup(mem.Close)
	cfg := testLimitsConfig(nil)
	ps := withPolicies(t, cfg, bidsPolicy(10, 25))
	l := newTestLimiter(t, cfg, mem, Options{Catalog: testCatalog(t), Policies: ps, Now: clock.now})
	ctx := context.Background()
	bid := func(user string) Decision {
		return l.Allow(ctx, &Request{IP: []byte("192.0.2.1"), Resource: "bids", Method: []byte("POST"), Attrs: headers{"X-User-Id": user}})
	}
	for i := range 10 {
		require.True(t, bid("u1").Allowed, "request %d", i)
	}
	d := bid("u1")
	require.False(t, d.Allowed, "the 11th in a second")
	assert.Equal(t, ScopePolicy, d.Scope)
	assert.Equal(t, "bids-per-user/1s", d.Name, "each limit of a policy of two has a name of its own")
	assert.Equal(t, time.Second, d.Window)
	assert.True(t, bid("u2").Allowed, "another user has a budget of its own")
	assert.True(t, bid("monitoring-bot").Allowed, "unlimited")
	assert.True(t, l.Allow(ctx, &Request{Resource: "bids", Method: []byte("POST")}).Allowed, "without the header: not counted")
	assert.True(t, l.Allow(ctx, &Request{Resource: "bids", Method: []byte("GET"), Attrs: headers{"X-User-Id": "u1"}}).Allowed, "GET does not match")

	passed := 10
	for s := 1; s < 10; s++ {
		clock.add(time.Second)
		for bid("u1").Allowed {
			passed++
		}
	}
	assert.Equal(t, 25, passed, "the day's quota")
	d = bid("u1")
	assert.Equal(t, int64(25), d.Limit, "refused by the quota")
	assert.Equal(t, "bids-per-user/day", d.Name)
	clock.set(time.Date(2026, 3, 3, 0, 0, 1, 0, time.UTC))
	assert.True(t, bid("u1").Allowed, "a new day")
}

// TestIPScopeAnonymous: limits.ip_scope anonymous leaves requests with a
// known API key to their key and tenant limits.
func TestIPScopeAnonymous(t *testing.T) {
	for _, scope := range []IPScope{IPScopeAll, IPScopeAnonymous} {
		cfg := testLimitsConfig(func(c *Config) { c.IP, c.IPScope = 2, scope })
		l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: testCatalog(t)})
		ctx := context.Background()
		known := &Request{IP: []byte("192.0.2.1"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM"}
		passed := 0
		for range 5 {
			if l.Allow(ctx, known).Allowed {
				passed++
			}
		}
		anon := &Request{IP: []byte("192.0.2.2")}
		anonPassed := 0
		for range 5 {
			if l.Allow(ctx, anon).Allowed {
				anonPassed++
			}
		}
		assert.Equal(t, 2, anonPassed, "%s: an anonymous client is held by its IP", scope)
		if scope == IPScopeAll {
			assert.Equal(t, 2, passed, "all: the IP limit holds a known client too")
		} else {
			assert.Equal(t, 5, passed, "anonymous: a known client is not held by its IP")
		}
	}
}

// TestPolicyMatchAnonymousAndPrefix: a policy for anonymous clients per
// /24, with an exempt range: the clients of one /24 share a budget.
func TestPolicyMatchAnonymousAndPrefix(t *testing.T) {
	yes := true
	cfg := testLimitsConfig(nil)
	ps := withPolicies(t, cfg, catalog.Policy{
		Name: "anon-subnet", Match: catalog.PolicyMatch{Anonymous: &yes}, Key: []string{"ip/24"},
		Limits:    []catalog.PolicyLimit{{Limit: 3}},
		Unlimited: catalog.Unlimited{CIDRs: []string{"198.51.100.0/24"}},
	})
	l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: testCatalog(t), Policies: ps})
	ctx := context.Background()
	ip := func(s string) *Request { return &Request{IP: []byte(s)} }
	for i, s := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		require.True(t, l.Allow(ctx, ip(s)).Allowed, "request %d", i)
	}
	assert.False(t, l.Allow(ctx, ip("192.0.2.200")).Allowed, "the /24's fourth")
	assert.True(t, l.Allow(ctx, ip("192.0.3.1")).Allowed, "another /24")
	assert.True(t, l.Allow(ctx, &Request{IP: []byte("192.0.2.9"), APIKey: []byte("k1"), Tenant: "acme"}).Allowed, "a known key is not anonymous")
	for range 10 {
		require.True(t, l.Allow(ctx, ip("198.51.100.7")).Allowed, "unlimited range")
	}
}

// TestPolicyMetrics: each limit of a policy counts its decisions. The
// counters are the process's (by policy and limit), so the test counts what
// its own decisions add; the clock is the test's, so that both fall in one
// second however slowly the machine runs them.
func TestPolicyMetrics(t *testing.T) {
	cfg := testLimitsConfig(nil)
	p := bidsPolicy(1, 100)
	p.Name = "metrics-test"
	ps := withPolicies(t, cfg, p)
	clock := &testClock{at: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)}
	mem := store.NewMemoryStore(store.MemoryOptions{Now: clock.now})
	t.Cleanup(mem.Close)
	l := newTestLimiter(t, cfg, mem, Options{Catalog: testCatalog(t), Policies: ps, Now: clock.now})
	req := &Request{Resource: "bids", Method: []byte("POST"), Attrs: headers{"X-User-Id": "u1"}}
	c := ps.All()[0].Counters
	allowed0, blocked0, day0 := c[0].Allowed.Get(), c[0].Blocked.Get(), c[1].Allowed.Get()
	l.Allow(context.Background(), req)
	l.Allow(context.Background(), req)
	assert.Equal(t, uint64(2), c[0].Allowed.Get()-allowed0+c[0].Blocked.Get()-blocked0, "1s: two decisions")
	assert.Equal(t, uint64(1), c[0].Blocked.Get()-blocked0, "1s: the second refused")
	assert.Equal(t, uint64(1), c[1].Allowed.Get()-day0, "day: only the first reached it")
}

// TestPolicyScaledAsOtherLimits: a policy's limits take the plan's
// multiplier when the key has the tenant, the adaptive multiplier from
// Moderate mode up, and shadow mode counts without refusing.
func TestPolicyScaledAsOtherLimits(t *testing.T) {
	cfg := testLimitsConfig(nil)
	ctx := context.Background()
	passes := func(l *Limiter, req *Request) (n int) {
		for range 20 {
			if d := l.Allow(ctx, req); d.Allowed && !d.Shadowed {
				n++
			}
		}
		return n
	}
	perTenant := catalog.Policy{Name: "per-tenant", Key: []string{"tenant"}, Limits: []catalog.PolicyLimit{{Limit: 2}}}
	premium := &Request{Tenant: "acme", Plan: "PREMIUM"}
	l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: testCatalog(t), Policies: withPolicies(t, cfg, perTenant)})
	assert.Equal(t, 6, passes(l, premium), "2 × PREMIUM's 3")

	perUser := catalog.Policy{Name: "per-user", Key: []string{"header:X-User-Id"}, Limits: []catalog.PolicyLimit{{Limit: 10}}}
	user := &Request{Attrs: headers{"X-User-Id": "u1"}}
	l = newTestLimiter(t, cfg, memStore(t), Options{Policies: withPolicies(t, cfg, perUser), Adjuster: fixedAdjuster{0.5, false}})
	assert.Equal(t, 5, passes(l, user), "10 × the adaptive multiplier 0.5")

	perUser.Shadow = true
	l = newTestLimiter(t, cfg, memStore(t), Options{Policies: withPolicies(t, cfg, perUser)})
	assert.Equal(t, 10, passes(l, user), "the 11th on is shadowed")
	assert.True(t, l.Allow(ctx, user).Allowed, "shadow never refuses")
}
