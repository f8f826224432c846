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

// TestLimiterKeyFloodRedis: pods on Redis with limits.max_keys 1,000 and a
// policy of 5 per hour per X-User-Id, one pod or three. 50 users use up
// their limit (each through one pod), then 7,000 new IDs come (6,000 past
// max_keys), spread over the pods. While Redis answers, every new ID is
// decided by Redis, the 50 stay refused and 50 users never seen are served;
// while Redis is paused (store timeouts, then the breaker), the 50 still
// stay refused and 50 more users never seen are served on the pods' local
// shares: the full local tables send no key to a budget others spent.
func TestLimiterKeyFloodRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, n := range []int{1, 3} {
		t.Run(strconv.Itoa(n)+"pods", func(t *testing.T) {
			pods := floodPods(t, srv.Addr, n)
			allow := func(i int, id string) bool {
				return pods[i%n].Allow(context.Background(), &Request{Attrs: headers{"X-User-Id": id}}).Allowed
			}
			for i := range 50 {
				for range 5 {
					require.True(t, allow(i, "held-"+strconv.Itoa(i)))
				}
				require.False(t, allow(i, "held-"+strconv.Itoa(i)))
			}
			for i := range 7000 {
				require.True(t, allow(i, "flood-"+strconv.Itoa(i)), "flood ID %d: Redis answers, it is under its limit", i)
			}
			l := pods[0]
			t.Logf("after the flood: %d local buckets, %d keys in the local share's table (max_keys %d)", l.table.len(), l.fallback.Len(), l.cfg.MaxKeys)
			assert.LessOrEqual(t, l.fallback.Len(), 2*l.cfg.MaxKeys)
			time.Sleep(2 * maxCachedDenial) // past the cached refusals: the next requests ask
			floodAnswers(t, allow, "new")
			srv.Pause()
			defer srv.Resume()
			local := fallbackLocal.Get()
			floodAnswers(t, allow, "paused")
			require.Greater(t, fallbackLocal.Get(), local, "the local policy decided")
		})
	}
}

// floodPods are n limiters on Redis at addr, each with its own client.
func floodPods(t *testing.T, addr string, n int) []*Limiter {
	cfg := testLimitsConfig(func(c *Config) {
		c.MaxKeys, c.StoreTimeout, c.BreakerCooldown = 1000, 200*time.Millisecond, time.Minute
	})
	ps := withPolicies(t, cfg, catalog.Policy{Name: "per-user", Key: []string{"header:X-User-Id"},
		Limits: []catalog.PolicyLimit{{Limit: 5, Window: confutil.Duration(time.Hour)}}})
	prefix := "f" + strconv.Itoa(n)
	var pods []*Limiter
	for range n {
		cl, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{addr}})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		pods = append(pods, newTestLimiter(t, cfg, store.NewRedisStore(cl, store.RedisStoreOptions{KeyPrefix: prefix}),
			Options{Catalog: testCatalog(t), Policies: ps, LivePods: func() int { return n }}))
	}
	return pods
}

// floodAnswers: the 50 exhausted users are refused by the pod they used,
// and 50 users never seen (named by phase) are served.
func floodAnswers(t *testing.T, allow func(int, string) bool, phase string) {
	heldRefused, fresh := 0, 0
	for i := range 50 {
		if !allow(i, "held-"+strconv.Itoa(i)) {
			heldRefused++
		}
		if allow(i, phase+"-"+strconv.Itoa(i)) {
			fresh++
		}
	}
	t.Logf("%s: %d of 50 exhausted users refused, %d of 50 new users served", phase, heldRefused, fresh)
	assert.Equal(t, 50, heldRefused, "exhausted users served after the flood (%s)", phase)
	assert.Equal(t, 50, fresh, "new users refused after the flood (%s)", phase)
}

// TestBucketTableKeepsSpentBuckets: a flood of new keys into a full table
// does not drop a bucket whose store answer said its budget is spent until
// a time to come; once that time has passed, it may go.
func TestBucketTableKeepsSpentBuckets(t *testing.T) {
	const maxKeys = 2 * bucketShards
	tab := newBucketTable(maxKeys)
	now := int64(1)
	var spent []*bucket
	for i := range maxKeys {
		b := tab.get([]byte("{p:u:held-"+strconv.Itoa(i)+"}"), now)
		b.answeredAt, b.remaining, b.resetAt = now, 0, now+int64(time.Hour)
		if tab.find([]byte(b.key), false) == b { // kept: its shard had room
			spent = append(spent, b)
		}
	}
	require.Greater(t, len(spent), maxKeys/2)
	for i := range 20_000 {
		tab.get([]byte("{p:u:flood-"+strconv.Itoa(i)+"}"), now)
	}
	for _, b := range spent {
		if tab.find([]byte(b.key), false) != b {
			t.Fatalf("the spent bucket of %s was dropped", b.key)
		}
	}
	later := now + int64(2*time.Hour)
	for i := range 20_000 {
		tab.get([]byte("{p:u:later-"+strconv.Itoa(i)+"}"), later)
	}
	kept := 0
	for _, b := range spent {
		if tab.find([]byte(b.key), false) == b {
			kept++
		}
	}
	assert.Less(t, kept, len(spent), "buckets whose budget is whole again make room")
}
