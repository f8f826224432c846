//go:build !race

package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestLimiterFastPathAllocatesNothing decides from local leases: IP, API key,
// tenant and a rule, all served without a store call.
func TestLimiterFastPathAllocatesNothing(t *testing.T) {
	cat := testCatalog(t, catalog.Rule{Tenant: "acme", Resource: "r", Algorithm: store.SlidingWindow, Limit: 1 << 39, Window: confutil.Duration(time.Hour)})
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.APIKey, c.Tenant = 1<<39, 1<<39, 1<<39
		c.Window = time.Hour
		c.LeaseTTL = time.Minute
		c.MaxLease = 1 << 19
	})
	l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: cat, Adjuster: fixedAdjuster{1, false}})
	req := &Request{IP: []byte("10.0.0.1"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r"}
	ctx := context.Background()
	for range firstUseMost + 10 { // past the first uses, which keep no bucket
		l.Allow(ctx, req)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if !l.Allow(ctx, req).Allowed {
			t.Fatal("rejected")
		}
	}); n != 0 {
		t.Fatalf("the local fast path allocates %.1f times per decision", n)
	}
}

// TestPolicyFastPathAllocatesNothing decides the base limits, a rule and
// three policies (one keyed by a header, one with a calendar quota, one by
// an IPv4 prefix with unlimited values and CIDRs) from local leases.
func TestPolicyFastPathAllocatesNothing(t *testing.T) {
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.APIKey, c.Tenant = 1<<39, 1<<39, 1<<39
		c.Window = time.Hour
		c.LeaseTTL = time.Minute
		c.MaxLease = 1 << 19
	})
	big := int64(1 << 39)
	cat := testCatalog(t, catalog.Rule{Tenant: "acme", Resource: "r", Algorithm: store.SlidingWindow, Limit: big, Window: confutil.Duration(time.Hour)})
	ps := withPolicies(t, cfg,
		catalog.Policy{Name: "per-user", Match: catalog.PolicyMatch{Methods: []string{"POST"}, Headers: map[string]string{"X-Env": "prod"}},
			Key: []string{"header:X-User-Id"}, Limits: []catalog.PolicyLimit{{Limit: big, Window: confutil.Duration(time.Hour)}}},
		catalog.Policy{Name: "tenant-day", Key: []string{"tenant", "resource"}, Limits: []catalog.PolicyLimit{{Limit: big, Period: store.Day}}},
		catalog.Policy{Name: "subnet", Key: []string{"ip/24"}, Limits: []catalog.PolicyLimit{{Limit: big, Window: confutil.Duration(time.Hour)}},
			Unlimited: catalog.Unlimited{Values: []string{"10.9.9.0/24"}, CIDRs: []string{"10.20.0.0/16"}}},
	)
	l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: cat, Policies: ps, Adjuster: fixedAdjuster{1, false}})
	req := &Request{IP: []byte("10.0.0.1"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r",
		Method: []byte("POST"), Attrs: &ptrHeaders{user: []byte("user-1"), env: []byte("prod")}}
	ctx := context.Background()
	for range firstUseMost + 10 { // past the first uses, which keep no bucket
		l.Allow(ctx, req)
	}
	specs := l.specs(nil, req, 1)
	require.Len(t, specs, 7, "four derived limits and three policies")
	if n := testing.AllocsPerRun(1000, func() {
		if !l.Allow(ctx, req).Allowed {
			t.Fatal("rejected")
		}
	}); n != 0 {
		t.Fatalf("a decision with policies allocates %.1f times", n)
	}
}
