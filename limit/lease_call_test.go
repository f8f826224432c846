package limit

import (
	"context"
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
	ended atomic.Int64 // calls that returned
}

func (d *delayedStore) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	res, err := d.Store.Lease(ctx, req)
	time.Sleep(time.Duration(d.back.Load()))
	d.ended.Add(1)
	return res, err
}

// TestLateAnswersRunInTimeKeepTheBreakerClosed: calls whose answers come
// after limits.store_timeout, but which Redis ran in time, count as the
// store's answers once they come: the breaker they opened closes, and the
// next request is decided by the store. Calls that Redis ran after their
// deadline (it was paused) stay failures: the breaker stays open.
func TestLateAnswersRunInTimeKeepTheBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		pause bool // Redis paused 1 s, else the answers delayed 1 s
		want  int32
	}{
		{"slow_way_back", false, breaker.Closed},
		{"redis_paused", true, breaker.Open},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &delayedStore{Store: newRedisStore(t, srv.Addr)}
			cfg := testLimitsConfig(func(c *Config) {
				c.IP, c.Window, c.StoreTimeout, c.BreakerFailures, c.BreakerCooldown = 100, time.Hour, 200*time.Millisecond, 2, time.Hour
				c.LocalFastPath = new(bool) // a store call for every request
			})
			l := newTestLimiter(t, cfg, st, Options{})
			req := &Request{IP: []byte("10.9.9." + tc.name)}
			require.True(t, l.Allow(context.Background(), req).Allowed) // learns Redis' clock
			if tc.pause {
				srv.Pause()
				time.AfterFunc(time.Second, srv.Resume)
			} else {
				st.back.Store(int64(time.Second))
			}
			late := storeAnswersLate.Get()
			for range 3 { // two timeouts open the breaker; the third is skipped
				l.Allow(context.Background(), req)
			}
			require.Equal(t, breaker.Open, l.breakers.State(), "two timeouts open the breaker")
			require.Eventually(t, func() bool { return st.ended.Load() == 3 }, 10*time.Second, 10*time.Millisecond, "the late answers came")
			assert.Equal(t, tc.want, l.breakers.State())
			if tc.want == breaker.Closed {
				assert.Equal(t, uint64(2), storeAnswersLate.Get()-late, "both late answers were read")
				st.back.Store(0)
				calls := storeCallsOK.Get()
				assert.True(t, l.Allow(context.Background(), req).Allowed)
				assert.Greater(t, storeCallsOK.Get(), calls, "decided by the store")
			}
		})
	}
}
