package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

func window(n int64) store.Params {
	return store.Params{Algorithm: store.SlidingWindow, Limit: n, Window: time.Minute}
}

// TestLimitsDecideAlone: a request that only names limits is decided by
// them, each key its own budget, apart from the derived limits' keys.
func TestLimitsDecideAlone(t *testing.T) {
	l := newTestLimiter(t, testLimitsConfig(func(c *Config) { c.IP = 1 }), memStore(t), Options{})
	ctx := context.Background()
	a := &Request{Limits: []Limit{{Name: "a", Key: []byte("ip"), Params: window(3)}}}
	for i := range 3 {
		d := l.Allow(ctx, a)
		require.True(t, d.Allowed, i)
		assert.Equal(t, int64(2-i), d.Remaining)
		assert.Equal(t, ScopeLimit, d.Scope)
		assert.Equal(t, "a", d.Name)
	}
	d := l.Allow(ctx, a)
	assert.False(t, d.Allowed)
	assert.Equal(t, "a", d.Name)
	// Another scope, and the IP limit whose key part is the same text.
	assert.True(t, l.Allow(ctx, &Request{Limits: []Limit{{Scope: "other", Key: []byte("ip"), Params: window(3)}}}).Allowed)
	assert.True(t, l.Allow(ctx, &Request{IP: []byte("ip")}).Allowed)
}

// TestLimitsBesideDerived: every limit must pass, the derived ones and the
// named ones.
func TestLimitsBesideDerived(t *testing.T) {
	l := newTestLimiter(t, testLimitsConfig(func(c *Config) { c.IP = 2 }), memStore(t), Options{})
	ctx := context.Background()
	req := &Request{IP: []byte("10.0.0.1"), Limits: []Limit{{Key: []byte("x"), Params: window(1)}}}
	assert.True(t, l.Allow(ctx, req).Allowed)
	d := l.Allow(ctx, req)
	assert.False(t, d.Allowed)
	assert.Equal(t, ScopeLimit, d.Scope)
	// A refused IP limit refuses too, whatever the named limits say.
	other := &Request{IP: []byte("10.0.0.2"), Limits: []Limit{{Key: []byte("y"), Params: window(10)}}}
	allowed, d := allowN(l, other, 3)
	assert.Equal(t, 2, allowed)
	assert.Equal(t, ScopeIP, d.Scope)
}

// TestLimitsShadowAndPeek: a shadow limit counts but never refuses; a peek
// answers what is left and takes nothing.
func TestLimitsShadowAndPeek(t *testing.T) {
	l := newTestLimiter(t, testLimitsConfig(nil), memStore(t), Options{})
	ctx := context.Background()
	shadow := &Request{Limits: []Limit{{Key: []byte("s"), Params: window(1), Shadow: true}}}
	assert.True(t, l.Allow(ctx, shadow).Allowed)
	d := l.Allow(ctx, shadow)
	assert.True(t, d.Allowed)
	assert.True(t, d.Shadowed)

	lim := []Limit{{Key: []byte("p"), Params: window(2)}}
	peek := &Request{Limits: lim, Peek: true}
	for range 3 {
		d = l.Allow(ctx, peek)
		require.True(t, d.Allowed)
		assert.Equal(t, int64(2), d.Remaining)
	}
	assert.Equal(t, int64(1), l.Allow(ctx, &Request{Limits: lim}).Remaining)
	assert.Equal(t, int64(1), l.Allow(ctx, peek).Remaining)
	assert.Equal(t, int64(0), l.Allow(ctx, &Request{Limits: lim}).Remaining)
	assert.False(t, l.Allow(ctx, peek).Allowed)
	most, scope := l.MaxTokens(&Request{Limits: lim})
	assert.Equal(t, int64(2), most)
	assert.Equal(t, ScopeLimit, scope)
}
