package limit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestLimiterKeyFloodRedis: a pod on Redis with limits.max_keys 1,000 and a
// policy of 5 per hour per X-User-Id. 50 users use up their limit, then
// 7,000 new IDs come (6,000 past max_keys). While Redis answers, every new
// ID is decided by Redis, the 50 stay refused and 50 users never seen are
// served; while Redis is paused (store timeouts, then the breaker), the 50
// still stay refused and 50 more users never seen are served on the pod's
// local share: the full local tables send no key to a budget others spent.
func TestLimiterKeyFloodRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.MaxKeys, c.StoreTimeout, c.BreakerCooldown = 1000, 200*time.Millisecond, time.Minute
	})
	ps := withPolicies(t, cfg, catalog.Policy{Name: "per-user", Key: []string{"header:X-User-Id"},
		Limits: []catalog.PolicyLimit{{Limit: 5, Window: confutil.Duration(time.Hour)}}})
	cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	l := newTestLimiter(t, cfg, store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: "f"}),
		Options{Catalog: testCatalog(t), Policies: ps})
	ctx := context.Background()
	allow := func(id string) bool { return l.Allow(ctx, &Request{Attrs: headers{"X-User-Id": id}}).Allowed }
	for i := range 50 {
		for range 5 {
			require.True(t, allow("held-"+strconv.Itoa(i)))
		}
		require.False(t, allow("held-"+strconv.Itoa(i)))
	}
	for i := range 7000 {
		require.True(t, allow("flood-"+strconv.Itoa(i)), "flood ID %d: Redis answers, it is under its limit", i)
	}
	t.Logf("after the flood: %d local buckets, %d keys in the local share's table (max_keys %d)", l.table.len(), l.fallback.Len(), cfg.MaxKeys)
	assert.LessOrEqual(t, l.fallback.Len(), 2*cfg.MaxKeys)
	time.Sleep(2 * maxCachedDenial) // past the cached refusals: the next requests ask
	heldRefused, fresh := 0, 0
	for i := range 50 {
		if !allow("held-" + strconv.Itoa(i)) {
			heldRefused++
		}
		if allow("new-" + strconv.Itoa(i)) {
			fresh++
		}
	}
	assert.Equal(t, 50, heldRefused, "exhausted users served after the flood, Redis answering")
	assert.Equal(t, 50, fresh, "new users refused after the flood, Redis answering")

	srv.Pause()
	defer srv.Resume()
	local := fallbackLocal.Get()
	heldRefused, fresh = 0, 0
	for i := range 50 {
		if !allow("held-" + strconv.Itoa(i)) {
			heldRefused++
		}
		if allow("paused-" + strconv.Itoa(i)) {
			fresh++
		}
	}
	require.Greater(t, fallbackLocal.Get(), local, "the local policy decided")
	assert.Equal(t, 50, heldRefused, "exhausted users served after the flood, Redis paused")
	assert.Equal(t, 50, fresh, "new users refused after the flood, Redis paused")
}
