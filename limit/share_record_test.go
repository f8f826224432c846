package limit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestShareCountHeldInTheBucket: the local share's count of a key's one
// lease stays in the key's bucket, with no entry in the share's table, and
// holds the pod to its share when the store fails. Two pods share a limit
// of 10; this pod took 5 in one grant, which left the store 5: what that
// answer left gives the pod room for 2 more alone (5 ÷ 2), its share (5)
// none.
func TestShareCountHeldInTheBucket(t *testing.T) {
	_, now, _, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) { c.IP, c.Window, c.BreakerFailures = 10, time.Minute, 1 })
	l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 2 }})
	ip := []byte("10.8.0.1")
	require.True(t, l.Allow(context.Background(), &Request{IP: ip, Tokens: 5}).Allowed)
	b := l.table.find(store.AppendKey(nil, "", "ip", ip), false)
	require.NotNil(t, b)
	assert.NotZero(t, b.shareKind, "the grant's share count is not in its bucket")
	assert.Equal(t, int64(5), shareCount(l, b, store.SlidingWindow, time.Minute))
	assert.Zero(t, l.fallback.Len(), "the share's table has an entry for the key")

	st.down.Store(true)
	alone, _ := allowN(l, &Request{IP: ip}, 10)
	assert.Zero(t, alone, "let through alone past the pod's share")
	assert.Zero(t, b.shareKind, "read, the count stayed in the bucket")
	assert.Equal(t, int64(5), shareCount(l, b, store.SlidingWindow, time.Minute), "the count moved to the share's table")
}

// TestShareCountLeavesWithItsBucket: a bucket that leaves the table (a
// full table makes room for a new key) moves its share count into the
// share's table first: the pod, without the bucket and its last answer,
// still keeps to its share when the store fails.
func TestShareCountLeavesWithItsBucket(t *testing.T) {
	clock, now, _, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.BreakerFailures = 10, time.Minute, 1
		c.MaxKeys = 1 // one shard of one bucket
	})
	l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 2 }})
	ip := []byte("10.8.0.2")
	require.True(t, l.Allow(context.Background(), &Request{IP: ip, Tokens: 5}).Allowed)
	key := store.AppendKey(nil, "", "ip", ip)
	require.NotNil(t, l.table.find(key, false))
	require.Zero(t, l.fallback.Len())

	clock.Add(int64(2 * inUse))
	require.True(t, l.Allow(context.Background(), &Request{IP: []byte("10.8.0.3")}).Allowed)
	require.Nil(t, l.table.find(key, false), "the full table kept the idle bucket")
	assert.Equal(t, 1, l.fallback.Len(), "the dropped bucket's count is not in the share's table")

	st.down.Store(true)
	alone, _ := allowN(l, &Request{IP: ip}, 10)
	assert.Zero(t, alone, "let through alone past the pod's share: the dropped bucket's count was lost")
}

// TestShareKindsNumberEachKindOnce: a kind keeps its number, and past 255
// kinds a new one gets none (its leases' share counts go to the table).
func TestShareKindsNumberEachKindOnce(t *testing.T) {
	var ks shareKinds
	for i := range 255 {
		k := shareKind{alg: store.SlidingWindow, window: time.Duration(i+1) * time.Second}
		require.Equal(t, uint8(i+1), ks.number(k))
		require.Equal(t, uint8(i+1), ks.number(k), "numbered twice")
		require.Equal(t, k, ks.kind(uint8(i+1)))
	}
	assert.Zero(t, ks.number(shareKind{alg: store.SlidingLog, window: time.Second}), "a 256th kind got a number")
	assert.Equal(t, uint8(1), ks.number(shareKind{alg: store.SlidingWindow, window: time.Second}))
}
