package limit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestSuccessorKeepsWhatTheLimiterKnows: a limiter that replaces another
// (a reload) while the store does not answer goes on from its state: the
// local share the old one used up stays used up, its breaker stays open,
// and the permits it let through alone reach the store with the new one's
// first call once the store answers again.
func TestSuccessorKeepsWhatTheLimiterKnows(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout = 30, time.Hour, 50*time.Millisecond
		c.BreakerFailures, c.BreakerCooldown = 2, time.Hour // no probe: the pause is an outage
		c.LocalFastPath = new(bool)                         // one permit per call: the counts are exact
	})
	three := Options{LivePods: func() int { return 3 }}
	old := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), three)
	stores := []*countingStore{newRedisStore(t, srv.Addr), newRedisStore(t, srv.Addr)} // connected before the pause
	req := &Request{IP: []byte("10.8.8.8")}
	first, _ := allowN(old, req, 1)
	require.Equal(t, 1, first)

	srv.Pause()
	alone, _ := allowN(old, req, 20)
	require.Positive(t, alone, "the old limiter let its share through")
	require.False(t, old.StoreHealthy())

	next := three
	next.Succeeds = old
	l := newTestLimiter(t, cfg, stores[0], next)
	old.Close()
	assert.False(t, l.StoreHealthy(), "the breaker starts closed again")
	again, _ := allowN(l, req, 20)
	assert.Zero(t, again, "the new limiter let the share through again")

	srv.Resume()
	cfg.BreakerCooldown = 50 * time.Millisecond
	next.Succeeds = l
	resumed := newTestLimiter(t, cfg, stores[1], next)
	l.Close()
	l = resumed                         // a second reload, now that the store answers: the report still goes
	time.Sleep(2 * cfg.BreakerCooldown) // the breaker carried over probes after its cooldown
	allowN(l, req, 1)
	require.Positive(t, stores[1].calls.Load(), "the new limiter called the store")
	time.Sleep(100 * time.Millisecond) // a trimmed grant returns in the background
	other := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), three)
	got, _ := allowN(other, req, 40)
	t.Logf("first %d, alone %d, after the reload %d; another pod then got %d of 30", first, alone, again, got)
	assert.LessOrEqual(t, first+alone+again+got, 30, "the permits let through alone were not reported")
}
