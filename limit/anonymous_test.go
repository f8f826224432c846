package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestAnonymousRuleLimitsEachIP: the rule of AnonymousTenant applies to each
// client IP without a tenant, and never to a tenant's requests.
func TestAnonymousRuleLimitsEachIP(t *testing.T) {
	cat := testCatalog(t, catalog.Rule{Tenant: catalog.AnonymousTenant, Resource: "r", Algorithm: store.SlidingWindow, Limit: 2, Window: confutil.Duration(time.Minute)})
	l := newTestLimiter(t, testLimitsConfig(nil), memStore(t), Options{Catalog: cat})
	ctx := context.Background()
	for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		req := &Request{IP: []byte(ip), Resource: "r"}
		allowed, last := allowN(l, req, 3)
		assert.Equal(t, 2, allowed, ip)
		assert.Equal(t, ScopeRule, last.Scope, ip)
	}
	tenant := &Request{IP: []byte("10.0.0.1"), Tenant: "acme", Plan: "PREMIUM", Resource: "r"}
	allowed, _ := allowN(l, tenant, 3)
	assert.Equal(t, 3, allowed, "a tenant is not anonymous")
	assert.True(t, l.Allow(ctx, &Request{IP: []byte("10.0.0.1"), Resource: "other"}).Allowed, "another resource")
	assert.True(t, l.Allow(ctx, &Request{Resource: "r"}).Allowed, "no IP: nothing to key the rule by")
}
