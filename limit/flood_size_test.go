package limit

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestLimiterBytesPerKey measures the heap one key of a header policy (5
// per hour) takes in a pod: its local bucket and its counter in the
// in-memory store, or with Redis its local bucket and its count in the
// local share's table (the Redis keys are Redis' memory); and with Redis,
// a slight key of a policy of a million per hour, its local bucket alone,
// and a key of that policy seen once, on a first use: the filter's slot
// alone. The figures are
// the ones docs/performance.md gives for limits.max_keys:
// `go test -run TestLimiterBytesPerKey -v ./limit/`.
func TestLimiterBytesPerKey(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		st := store.NewMemoryStore(store.MemoryOptions{MaxKeys: 1 << 20})
		t.Cleanup(st.Close)
		limiterBytesPerKey(t, st, 5, 1, 500, false)
	})
	// The same keys a second after their last use: the in-process store's
	// count alone (see bucketTable.sweep).
	t.Run("memory-idle", func(t *testing.T) {
		st := store.NewMemoryStore(store.MemoryOptions{MaxKeys: 1 << 20})
		t.Cleanup(st.Close)
		limiterBytesPerKey(t, st, 5, 1, 250, true)
	})
	t.Run("redis", func(t *testing.T) {
		cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{redistest.Start(t).Addr}})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		limiterBytesPerKey(t, store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: "m"}), 5, 1, 300, false)
	})
	// A slight key (a few requests under a limit of a million, the last of
	// them past the pod's first uses): its local bucket alone, which goes a
	// second after its last use (see Limiter.useLocally; the limiter's
	// clock stands still here, so that all are held).
	t.Run("redis-slight", func(t *testing.T) {
		cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{redistest.Start(t).Addr}})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		limiterBytesPerKey(t, store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: "m"}), 1_000_000, firstUseMost+1, 380, false)
	})
	// A key seen once under that limit: a first use, which keeps no bucket.
	t.Run("redis-first-use", func(t *testing.T) {
		cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{redistest.Start(t).Addr}})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		limiterBytesPerKey(t, store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: "m"}), 1_000_000, 1, 64, false)
	})
}

func limiterBytesPerKey(t *testing.T, st store.Store, limit int64, requests int, most float64, idle bool) {
	const keys = 100_000
	// limits.window 1h: idle buckets are swept after 2 h, so all are held
	// (but with the in-process store once idle for a second: idle).
	cfg := testLimitsConfig(func(c *Config) { c.MaxKeys, c.Window = 1<<20, time.Hour })
	ps := withPolicies(t, cfg, catalog.Policy{Name: "per-user", Key: []string{"header:X-User-Id"},
		Limits: []catalog.PolicyLimit{{Limit: limit, Window: confutil.Duration(time.Hour)}}})
	var at atomic.Int64 // the limiter's clock stands still but for idle
	at.Store(time.Now().UnixNano())
	l := newTestLimiter(t, cfg, st, Options{Catalog: testCatalog(t), Policies: ps, Now: func() time.Time { return time.Unix(0, at.Load()) }})
	h := headers{"X-User-Id": "warm-up"}
	req := &Request{Attrs: h}
	ctx := context.Background()
	// What the limiter and the store's client take whatever the keys (the
	// tables' shards, the client's connection and its buffers) is not a
	// key's: made before the count starts.
	require.True(t, l.Allow(ctx, req).Allowed)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := range keys {
		h["X-User-Id"] = "user-" + strconv.Itoa(1_000_000+i)
		for range requests {
			require.True(t, l.Allow(ctx, req).Allowed)
		}
	}
	took := time.Since(start)
	if idle {
		at.Add(int64(2 * inUse))
		l.sweep()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / keys
	t.Logf("limiter on %T: %d keys in %.1f s: %d local buckets, %d keys in the local share's table, %.0f B per key",
		st, keys, took.Seconds(), l.table.len(), l.fallback.Len(), per)
	assert.Less(t, per, most, "a key takes more than docs/performance.md says")
	runtime.KeepAlive(l)
}
