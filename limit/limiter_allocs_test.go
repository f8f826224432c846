//go:build !race

package limit

import (
	"context"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// TestLimiterFastPathAllocatesNothing decides from local leases: IP, API key,
// tenant and a rule, all served without a store call.
func TestLimiterFastPathAllocatesNothing(t *testing.T) {
	cat := testCatalog(t, catalog.Rule{Tenant: "acme", Resource: "r", Algorithm: "sliding_window", Limit: 1 << 39, Window: confutil.Duration(time.Hour)})
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.APIKey, c.Tenant = 1<<39, 1<<39, 1<<39
		c.Window = time.Hour
		c.LeaseTTL = time.Minute
		c.MaxLease = 1 << 19
	})
	l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: cat, Adjuster: fixedAdjuster{1, false}})
	req := &Request{IP: []byte("10.0.0.1"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r"}
	ctx := context.Background()
	for range 10 {
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
