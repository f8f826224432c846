//go:build !race

package limit

import (
	"context"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestAnonymousRuleAllocatesNothing: the per-IP rule of anonymous clients is
// served from local leases without allocating too.
func TestAnonymousRuleAllocatesNothing(t *testing.T) {
	cat := testCatalog(t, catalog.Rule{Tenant: catalog.AnonymousTenant, Resource: "r", Algorithm: store.SlidingWindow, Limit: 1 << 39, Window: confutil.Duration(time.Hour)})
	cfg := testLimitsConfig(func(c *Config) {
		c.Window, c.LeaseTTL, c.MaxLease = time.Hour, time.Minute, 1<<19
	})
	l := newTestLimiter(t, cfg, memStore(t), Options{Catalog: cat, Adjuster: fixedAdjuster{1, false}})
	req := &Request{IP: []byte("2001:db8::1"), Resource: "r"}
	ctx := context.Background()
	for range 10 {
		l.Allow(ctx, req)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if d := l.Allow(ctx, req); !d.Allowed || d.Scope != ScopeRule {
			t.Fatalf("decision %+v", d)
		}
	}); n != 0 {
		t.Fatalf("the anonymous rule allocates %.1f times per decision", n)
	}
}
