package limit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/breaker"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// delayedStore delays a real store's answers on their way back (a busy
// pod).
type delayedStore struct {
	store.Store
	back  atomic.Int64 // nanoseconds
	ended atomic.Int64 // calls for permits that returned (not returns of them)
}

func (d *delayedStore) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	res, err := d.Store.Lease(ctx, req)
	time.Sleep(time.Duration(d.back.Load()))
	if req.Want > 0 {
		d.ended.Add(1)
	}
	return res, err
}

// TestLateAnswersRunInTimeKeepTheBreakerClosed: calls whose answers come
// after limits.store_timeout, but which Redis ran in time, end the run of
// failures once they come: timeouts of a busy pod with answers coming
// between them never open the breaker. Calls that Redis ran after their
// deadline (it was paused) stay failures: their run opens it, and it stays
// open when their answers come.
func TestLateAnswersRunInTimeKeepTheBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Window, c.StoreTimeout, c.BreakerFailures, c.BreakerCooldown = 100, time.Hour, 200*time.Millisecond, 3, time.Hour
		c.LocalFastPath = new(bool) // a store call for every request
	})
	setup := func(t *testing.T) (*Limiter, *delayedStore, func(n int)) {
		st := &delayedStore{Store: newRedisStore(t, srv.Addr)}
		l := newTestLimiter(t, cfg, st, Options{})
		next := 0
		allow := func(n int) { // n requests of keys not seen before
			for range n {
				next++
				l.Allow(context.Background(), &Request{IP: []byte(fmt.Sprintf("10.9.%s.%d", t.Name(), next))})
			}
		}
		allow(1) // learns Redis' clock
		return l, st, allow
	}
	ended := func(t *testing.T, st *delayedStore, n int64) {
		require.Eventually(t, func() bool { return st.ended.Load() == n }, 10*time.Second, 10*time.Millisecond, "the late answers came")
	}

	t.Run("slow_way_back", func(t *testing.T) {
		l, st, allow := setup(t)
		st.back.Store(int64(time.Second))
		late := storeAnswersLate.Get()
		allow(2) // two timeouts, short of the three that open the breaker
		ended(t, st, 3)
		allow(2) // two more: four in all
		assert.Equal(t, breaker.Closed, l.breakers.State(), "the answers between the timeouts ended their run")
		assert.Equal(t, uint64(2), storeAnswersLate.Get()-late, "the late answers were read")
		ended(t, st, 5)
		st.back.Store(0)
		calls := storeCallsOK.Get()
		allow(1)
		assert.Greater(t, storeCallsOK.Get(), calls, "decided by the store")
	})
	t.Run("redis_paused", func(t *testing.T) {
		l, st, allow := setup(t)
		srv.Pause()
		allow(3) // three timeouts: 600 ms of the pause
		srv.Resume()
		ended(t, st, 4)
		assert.Equal(t, breaker.Open, l.breakers.State(), "calls Redis ran past their deadline stay failures")
	})
}
