package limit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
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

// TestPolicyResetAcrossPods: two pods on one Redis spend a policy's two
// limits (a window and a day's quota) for one client, keyed by its /24 and
// a header (one value long enough to be hashed); resetting the keys that
// PolicyKey and AppendIdentityOf make of the values a caller writes gives
// it both budgets whole on both pods, while another client keeps its
// counts.
func TestPolicyResetAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(nil)
	pc := catalog.Policy{Name: "per-user", Key: []string{"ip/24", "header:X-User-Id"}, Limits: []catalog.PolicyLimit{
		{Limit: 6, Window: confutil.Duration(time.Hour)}, {Limit: 4, Period: store.Day}}}
	ps := withPolicies(t, cfg, pc)
	var pods []*Limiter
	for range 2 {
		pods = append(pods, newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{Policies: ps}))
	}
	ctx := context.Background()
	long := strings.Repeat("u", catalog.MaxValueLen+1)
	for _, user := range []string{"u1:a", long} {
		req := &Request{IP: []byte("10.0.0.7"), Attrs: headers{"X-User-Id": user}}
		other := &Request{IP: []byte("10.0.0.7"), Attrs: headers{"X-User-Id": "u2"}}
		for _, r := range []*Request{req, other} {
			for _, p := range pods {
				for p.Allow(ctx, r).Allowed {
				}
			}
		}
		p, ok := ps.Lookup("per-user")
		require.True(t, ok)
		id, err := p.AppendIdentityOf(nil, []string{"10.0.0.200", user})
		require.NoError(t, err)
		for i := range p.Params {
			key := PolicyKey(nil, p, i, id)
			require.NoError(t, pods[0].Reset(ctx, key, p.Params[i]), "%s", key)
			pods[1].Forget(key)
		}
		passed := 0
		for i, pod := range pods {
			assert.False(t, pod.Allow(ctx, other).Allowed, "pod %d: another user keeps its counts", i)
			for j := 0; pod.Allow(ctx, req).Allowed; j++ {
				require.Less(t, j, 10)
				passed++
			}
		}
		assert.Equal(t, 4, passed, "%.8s: a whole quota (and a window of 6 that no longer holds the 4 before)", user)
	}
}
