package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

func shorthandCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := NewCatalog(nil, []Tenant{{ID: "acme", Plan: "PREMIUM"}}, []Rule{
		{Tenant: "acme", Resource: "bids", Algorithm: store.SlidingWindow, Limit: 20, Window: confutil.Duration(time.Minute), Shadow: true},
		{Tenant: AnonymousTenant, Resource: "bids", Algorithm: store.TokenBucket, Capacity: 5, RefillRate: 1},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestShorthandKeysAreTheirOwn: each shorthand limit keeps the store key
// it had before policies, byte for byte (a long API key as it is), so
// that counters carry on across an upgrade.
func TestShorthandKeysAreTheirOwn(t *testing.T) {
	cat := shorthandCatalog(t)
	ps := CompileShorthand(Shorthands{Tenant: 10, APIKey: 5, IP: 7}, testDefaults, cat)
	require.Len(t, ps, 4)
	long := []byte(strings.Repeat("k", 300))
	known := &Subject{IP: []byte("10.0.0.1"), APIKey: long, Tenant: "acme", Plan: "PREMIUM", Resource: "bids"}
	anon := &Subject{IP: []byte("10.0.0.1"), Resource: "bids"}
	key := func(p *CompiledPolicy, s *Subject) string {
		id, ok := p.AppendIdentity(nil, s)
		require.True(t, ok, p.Name)
		require.Empty(t, id, "a shorthand's key holds its values")
		return string(p.AppendKey(nil, 0, id, s))
	}
	assert.Equal(t, string(store.AppendKeyStrings(nil, "", "rule", "acme", "bids")), key(ps[0], known))
	assert.Equal(t, string(store.AppendKeyStrings(nil, "", "rule", AnonymousTenant, "bids", "10.0.0.1")), key(ps[0], anon))
	assert.Equal(t, string(store.AppendKeyStrings(nil, "", "tenant", "acme")), key(ps[1], known))
	assert.Equal(t, string(store.AppendKey(nil, "", "key", long)), key(ps[2], known), "not hashed")
	assert.Equal(t, string(store.AppendKey(nil, "", "ip", []byte("10.0.0.1"))), key(ps[3], known))

	_, ok := ps[1].AppendIdentity(nil, anon)
	assert.False(t, ok, "no tenant: the tenant limit does not count the request")
	ip := CompileShorthand(Shorthands{IP: 7, IPAnonymous: true}, testDefaults, nil)
	require.Len(t, ip, 1)
	assert.False(t, ip[0].Matches(known), "ip_scope anonymous")
	assert.True(t, ip[0].Matches(anon))
}

// TestShorthandLimits: the rules resolve from the catalog for each
// request; the limits section's limits are n per window, multiplied
// before a token bucket's refill derives from them, as before policies.
func TestShorthandLimits(t *testing.T) {
	cat := shorthandCatalog(t)
	ps := CompileShorthand(Shorthands{Tenant: 10}, testDefaults, cat)
	known := &Subject{Tenant: "acme", Resource: "bids"}
	var p store.Params
	shadow, ok := ps[0].Limit(&p, 0, known, 1, 0.5)
	require.True(t, ok)
	assert.True(t, shadow, "the rule's shadow flag")
	assert.Equal(t, store.Params{Algorithm: store.SlidingWindow, Limit: 10, Window: time.Minute}, p)
	_, ok = ps[0].Limit(&p, 0, &Subject{Tenant: "acme", Resource: "other"}, 1, 1)
	assert.False(t, ok, "no rule")
	_, ok = ps[0].Limit(&p, 0, &Subject{Resource: "bids"}, 1, 1)
	assert.False(t, ok, "the anonymous rule needs a client IP")

	tb := Defaults{Algorithm: store.TokenBucket, Window: 2 * time.Second}
	tenant := CompileShorthand(Shorthands{Tenant: 10}, tb, nil)[0]
	tenant.Limit(&p, 0, known, 1.33, 0.5)
	assert.Equal(t, store.Params{Algorithm: store.TokenBucket, Capacity: 6, RefillRate: 3}, p, "10 × 1.33 = 13, × 0.5 = 6 per 2s")
	for _, def := range []Defaults{testDefaults, tb, {Algorithm: store.SlidingLog, Window: time.Minute}} {
		c := CompileShorthand(Shorthands{APIKey: 9}, def, nil)[0]
		var p store.Params
		c.Limit(&p, 0, &Subject{APIKey: []byte("k")}, 1, 1)
		assert.Equal(t, c.Params[0], p, "the policy it compiles to: %v", def.Algorithm)
		assert.False(t, c.PlanMultiplier)
	}
	assert.True(t, tenant.PlanMultiplier)
}
