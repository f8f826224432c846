package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// resetKey is the store key of a derived limit's budget, as the admin API
// builds it for a reset.
func resetKey(scope string, parts ...string) []byte {
	return store.AppendKeyStrings(nil, "", scope, parts...)
}

// TestResetAcrossPods: three pods on one Redis spend each derived limit's
// budget; a reset of its key (as the admin API builds it) on one pod,
// and Forget on the others as the reset's message makes them, lets every
// pod admit again at once, and another key keeps its counts.
func TestResetAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	cat := testCatalog(t, catalog.Rule{Tenant: "acme", Resource: "bids", Algorithm: store.TokenBucket, Capacity: 6, RefillRate: 0},
		catalog.Rule{Tenant: catalog.AnonymousTenant, Resource: "r", Algorithm: store.SlidingWindow, Limit: 3, Window: confutil.Duration(time.Hour)})
	cfg := testLimitsConfig(func(c *Config) { c.IP, c.APIKey, c.Tenant, c.Window = 6, 6, 6, time.Hour })
	var pods []*Limiter
	for range 3 {
		pods = append(pods, newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{Catalog: cat}))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		req, other Request
		key        []byte
	}{
		{"ip", Request{IP: []byte("10.0.0.1")}, Request{IP: []byte("10.0.0.2")}, resetKey("ip", "10.0.0.1")},
		{"api_key", Request{APIKey: []byte("k1")}, Request{APIKey: []byte("k2")}, resetKey("key", "k1")},
		{"rule", Request{Tenant: "acme", Plan: "PREMIUM", Resource: "bids"}, Request{Tenant: "acme", Plan: "PREMIUM", Resource: "bids", IP: []byte("10.9.9.9")}, resetKey("rule", "acme", "bids")},
		{"anonymous rule", Request{Resource: "r", IP: []byte("10.1.1.1")}, Request{Resource: "r", IP: []byte("10.1.1.2")}, resetKey("rule", catalog.AnonymousTenant, "r", "10.1.1.1")},
		{"tenant", Request{Tenant: "free", Plan: "FREE"}, Request{Tenant: "acme", Plan: "PREMIUM"}, resetKey("tenant", "free")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spend := func(req *Request) {
				for _, p := range pods {
					for p.Allow(ctx, req).Allowed {
					}
				}
			}
			spend(&tc.req)
			if tc.name != "rule" { // the other request of the rule is the same budget
				spend(&tc.other)
			}
			require.NoError(t, pods[0].Reset(ctx, tc.key, store.Params{}))
			for _, p := range pods[1:] {
				p.Forget(tc.key)
			}
			for i, p := range pods {
				assert.True(t, p.Allow(ctx, &tc.req).Allowed, "pod %d admits after the reset", i)
			}
			if tc.name != "rule" {
				assert.False(t, pods[1].Allow(ctx, &tc.other).Allowed, "another key keeps its counts")
			}
		})
	}
}
