package limit

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestBounds: config and rule values past the documented bounds are errors
// naming the YAML key; the bounds themselves are accepted.
func TestBounds(t *testing.T) {
	cfg := func(mod func(*Config)) error {
		var c Config
		c.SetDefaults()
		mod(&c)
		return c.Validate()
	}
	for key, mod := range map[string]func(*Config){
		"limits.tenant":  func(c *Config) { c.Tenant = store.MaxLimit + 1 },
		"limits.api_key": func(c *Config) { c.APIKey = math.MaxInt64 },
		"limits.ip":      func(c *Config) { c.IP = -1 },
		"limits.window":  func(c *Config) { c.Window = store.MaxWindow + time.Millisecond },
	} {
		var ve *catalog.ValidationError
		require.ErrorAs(t, cfg(mod), &ve, key)
		assert.Equal(t, key, ve.Field)
	}
	assert.NoError(t, cfg(func(c *Config) {
		c.Tenant, c.APIKey, c.IP, c.Window = store.MaxLimit, store.MaxLimit, store.MaxLimit, store.MaxWindow
	}))

	rule := func(r catalog.Rule) error {
		r.Tenant, r.Resource = "t", "r"
		return r.Validate("rules[0]")
	}
	for key, r := range map[string]catalog.Rule{
		"rules[0].refill_rate": {Algorithm: store.TokenBucket, Capacity: 5, RefillRate: 1e-300},
		"rules[0].capacity":    {Algorithm: store.TokenBucket, Capacity: store.MaxLimit + 1, RefillRate: 1},
		"rules[0].limit":       {Algorithm: store.SlidingWindow, Limit: math.MaxInt64, Window: confutil.Duration(time.Second)},
		"rules[0].window":      {Algorithm: store.SlidingLog, Limit: 1, Window: confutil.Duration(25 * time.Hour)},
	} {
		var ve *catalog.ValidationError
		require.ErrorAs(t, rule(r), &ve, key)
		assert.Equal(t, key, ve.Field)
	}
	for _, r := range []catalog.Rule{
		{Algorithm: store.TokenBucket, Capacity: 1, RefillRate: store.MinRefillRate},
		{Algorithm: store.TokenBucket, Capacity: store.MaxLimit, RefillRate: store.MaxLimit},
		{Algorithm: store.TokenBucket, Capacity: store.MaxLimit, RefillRate: 0},
		{Algorithm: store.SlidingWindow, Limit: store.MaxLimit, Window: confutil.Duration(store.MaxWindow)},
	} {
		assert.NoError(t, rule(r), "%+v", r)
	}
}

// TestLimiterMaxTokens: the most tokens a request can take is the smallest
// capacity that applies; sliding_log takes at most MaxLogTokens at once, and
// a request for more is refused without a store call.
func TestLimiterMaxTokens(t *testing.T) {
	cat := testCatalog(t, catalog.Rule{Tenant: "acme", Resource: "log", Algorithm: store.SlidingLog, Limit: 5000, Window: confutil.Duration(time.Second)})
	st := memStore(t)
	l := newTestLimiter(t, testLimitsConfig(func(c *Config) { c.IP = 50; c.Tenant = 10000 }), st, Options{Catalog: cat})
	most, scope := l.MaxTokens(&Request{IP: []byte("a"), Tenant: "acme", Plan: "PREMIUM", Resource: "x"})
	assert.Equal(t, int64(50), most)
	assert.Equal(t, ScopeIP, scope)
	most, scope = l.MaxTokens(&Request{Tenant: "acme", Plan: "PREMIUM", Resource: "log"})
	assert.Equal(t, int64(store.MaxLogTokens), most)
	assert.Equal(t, ScopeRule, scope)
	d := l.Allow(t.Context(), &Request{IP: []byte("a"), Tokens: 51})
	assert.False(t, d.Allowed)
	assert.Zero(t, st.calls.Load(), "no store call for a request over the capacity")
	assert.True(t, l.Allow(t.Context(), &Request{IP: []byte("a"), Tokens: 50}).Allowed)
}

// TestMaxTokensMatchesSpecs: MaxTokens reads the limits' bounds without
// building their specs; whatever the algorithm, plan, rule and request, it
// names the same bound and scope as the specs Allow decides with (before any
// adaptive reduction).
func TestMaxTokensMatchesSpecs(t *testing.T) {
	cat := testCatalog(t,
		catalog.Rule{Tenant: "acme", Resource: "log", Algorithm: store.SlidingLog, Limit: 5000, Window: confutil.Duration(time.Second)},
		catalog.Rule{Tenant: "acme", Resource: "tb", Algorithm: store.TokenBucket, Capacity: 7, RefillRate: 1},
		catalog.Rule{Tenant: "free", Resource: "sw", Algorithm: store.SlidingWindow, Limit: 40, Window: confutil.Duration(time.Second)},
		catalog.Rule{Tenant: catalog.AnonymousTenant, Resource: "sw", Algorithm: store.SlidingWindow, Limit: 3, Window: confutil.Duration(time.Second)},
	)
	reqs := []Request{
		{IP: []byte("a"), Tenant: "acme", Plan: "PREMIUM", Resource: "x"},
		{Tenant: "acme", Plan: "PREMIUM", Resource: "log"},
		{Tenant: "acme", Plan: "PREMIUM", Resource: "tb", APIKey: []byte("k1")},
		{Tenant: "free", Plan: "FREE", Resource: "sw", APIKey: []byte("k2"), IP: []byte("b")},
		{IP: []byte("c"), Resource: "sw"},
		{IP: []byte("c")},
		{},
	}
	for _, alg := range []store.Algorithm{store.SlidingWindow, store.TokenBucket, store.SlidingLog} {
		for _, base := range [][3]int64{{10000, 50, 50}, {30, 0, 100}, {0, 0, 0}, {5, 9000, 2}} {
			l := newTestLimiter(t, testLimitsConfig(func(c *Config) {
				c.Algorithm = alg
				c.Tenant, c.APIKey, c.IP = base[0], base[1], base[2]
			}), memStore(t), Options{Catalog: cat})
			for _, req := range reqs {
				specs := l.specs(nil, &req, 1)
				want, wantScope := int64(store.MaxLimit), ScopeNone
				for i := range specs {
					if specs[i].most < want {
						want, wantScope = specs[i].most, specs[i].scope
					}
				}
				most, scope := l.MaxTokens(&req)
				assert.Equal(t, want, most, "%s %v %+v", alg, base, req)
				assert.Equal(t, wantScope, scope, "%s %v %+v", alg, base, req)
			}
		}
	}
}
