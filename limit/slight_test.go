package limit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestSlightKeysTakeNoShareCountAndGoSoon: keys of a large population,
// each a request or two under a limit far above, keep no count in the
// local share, and their buckets go a second after their last use
// instead of ten; a key whose count is more than a thousandth of its limit
// keeps both (its one lease's share count in its bucket: holdShare).
func TestSlightKeysTakeNoShareCountAndGoSoon(t *testing.T) {
	for _, c := range []struct {
		limit  int
		slight bool
	}{{1_000_000, true}, {999, false}} {
		t.Run(strconv.Itoa(c.limit), func(t *testing.T) {
			clock, now, _, st := clockedStore(t)
			cfg := testLimitsConfig(func(cfg *Config) { cfg.IP, cfg.Window = int64(c.limit), time.Minute })
			l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 3 }})
			const keys = 100
			for i := range keys {
				// The first requests go through on the permits the store
				// keeps for the pod (TestFirstUseTakesNoStoreCall); one more
				// asks the store.
				for range firstUseMost + 1 {
					require.True(t, l.Allow(context.Background(), &Request{IP: []byte("10.7.0." + strconv.Itoa(i))}).Allowed)
				}
			}
			require.Equal(t, keys, l.table.len())
			clock.Add(int64(1500 * time.Millisecond))
			l.sweep()
			if c.slight {
				assert.Zero(t, l.fallback.Len(), "slight grants counted in the local share")
				assert.Zero(t, l.table.len(), "slight buckets kept after a second unused")
			} else {
				assert.Equal(t, keys, l.table.len())
				l.table.each(func(b *bucket) {
					// Every permit granted: the uses and the lease's unused ones.
					assert.GreaterOrEqual(t, shareCount(l, b, store.SlidingWindow, time.Minute), int64(firstUseMost+1), "the share's count of %s", b.key)
				})
			}
		})
	}
}

// TestSlightGrantsMissAThousandthAtMost: the share does not count slight
// grants, and a slight bucket goes with the store's last answer a second
// after its last use; so a pod whose store fails after that lets through
// at most a thousandth of the limit more than the limit in the window.
func TestSlightGrantsMissAThousandthAtMost(t *testing.T) {
	const limit = 2000
	clock, now, _, st := clockedStore(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window = limit, time.Minute
		c.BreakerFailures = 1
		c.LocalFastPath = new(bool) // one permit per call: the store's count is exact
	})
	l := newTestLimiter(t, cfg, st, Options{Now: now, LivePods: func() int { return 1 }})
	req := &Request{IP: []byte("10.7.1.1")}
	// The most that stays slight: the store's count leaves out the permits
	// it keeps for the pod's first uses (which this pod, asking the store
	// for every decision, does not take; its share leaves them out too).
	fromStore, _ := allowN(l, req, limit/slightPart)
	require.Equal(t, limit/slightPart, fromStore)
	clock.Add(int64(1500 * time.Millisecond))
	l.sweep()
	require.Zero(t, l.table.len())
	st.down.Store(true)
	alone, _ := allowN(l, req, 3*limit)
	t.Logf("%d from the store, %d alone", fromStore, alone)
	assert.LessOrEqual(t, fromStore+alone, limit+limit/slightPart)
	assert.GreaterOrEqual(t, fromStore+alone, limit, "the share refused under the limit")
}

// shareCount is the local share's count of b's key (a limit of alg over
// window): what b holds (holdShare) and what the share's table counts.
func shareCount(l *Limiter, b *bucket, alg store.Algorithm, window time.Duration) int64 {
	b.mu.Lock()
	var n int64
	if b.shareKind != 0 {
		n = b.localRef
	}
	b.mu.Unlock()
	l.fallback.Counted([]byte(b.key), alg, window, func(_, c int64) { n += c })
	return n
}
