package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// lookStore records whether any call to it asked for permits.
type lookStore struct {
	store.Store
	wanted atomic.Int64
}

func (s *lookStore) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	s.wanted.Add(req.Want)
	return s.Store.Lease(ctx, req)
}

// TestPeekLooksAtEveryLimit: a peek asks each store for no permits, answers
// every limit that applies (Applied), the least remaining on top, and this
// pod's leased permits count as remaining.
func TestPeekLooksAtEveryLimit(t *testing.T) {
	for name, newStore := range map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memStore(t) },
		"redis":  func(t *testing.T) store.Store { return newRedisStore(t, redistest.Start(t).Addr) },
	} {
		t.Run(name, func(t *testing.T) {
			st := &lookStore{Store: newStore(t)}
			l := newTestLimiter(t, testLimitsConfig(func(c *Config) { c.IP, c.APIKey = 10, 4 }), st, Options{})
			ctx := context.Background()
			req := &Request{IP: []byte("10.0.0.1"), APIKey: []byte("k"), Limits: []Limit{{Name: "daily", Key: []byte("u"), Params: window(6)}}}
			_, d := allowN(l, req, 2)
			require.True(t, d.Allowed)
			taken := st.wanted.Load()

			peek := *req
			peek.Peek = true
			for range 3 {
				d = l.Allow(ctx, &peek)
				assert.True(t, d.Allowed)
				assert.Equal(t, ScopeAPIKey, d.Scope)
				assert.Equal(t, int64(2), d.Remaining)
				require.Equal(t, 3, d.NApplied)
				assert.Equal(t, []Applied{
					{Scope: ScopeAPIKey, Limit: 4, Remaining: 2, Window: time.Second, Reset: d.Applied[0].Reset},
					{Scope: ScopeIP, Limit: 10, Remaining: 8, Window: time.Second, Reset: d.Applied[1].Reset},
					{Scope: ScopeLimit, Name: "daily", Limit: 6, Remaining: 4, Window: time.Minute, Reset: d.Applied[2].Reset},
				}, d.Applied[:d.NApplied])
			}
			assert.Equal(t, taken, st.wanted.Load(), "a peek asks for no permits")

			peek.Tokens = 3
			d = l.Allow(ctx, &peek)
			assert.False(t, d.Allowed, "3 more would not pass the API key limit")
			assert.Equal(t, ScopeAPIKey, d.Scope)
			assert.Positive(t, d.RetryAfter)
			assert.Equal(t, 3, d.NApplied, "a peek answers every limit, past a refusal")
			allowed, _ := allowN(l, req, 3)
			assert.Equal(t, 2, allowed, "the peeks took nothing")
		})
	}
}

// TestPeekNeverRefusesAnotherPod: pods that peek a key all the time never
// make another pod's request at the edge of the budget refused.
func TestPeekNeverRefusesAnotherPod(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testLimitsConfig(func(c *Config) { c.IP, c.Window = 50, time.Minute })
	worker := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
	ctx := context.Background()
	req := &Request{IP: []byte("10.0.0.9")}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		peeker := newTestLimiter(t, cfg, newRedisStore(t, srv.Addr), Options{})
		wg.Go(func() {
			for !stop.Load() {
				peeker.Allow(ctx, &Request{IP: req.IP, Peek: true})
			}
		})
	}
	allowed, _ := allowN(worker, req, 50)
	stop.Store(true)
	wg.Wait()
	assert.Equal(t, 50, allowed, "every request under the limit passes while others peek")
	assert.False(t, worker.Allow(ctx, req).Allowed)
}

// TestQuotaWindowIsItsPeriod: a calendar quota's window, for the headers,
// is the length of its current period.
func TestQuotaWindowIsItsPeriod(t *testing.T) {
	l := newTestLimiter(t, testLimitsConfig(nil), memStore(t), Options{})
	d := l.Allow(context.Background(), &Request{Limits: []Limit{{Name: "daily", Key: []byte("u"), Params: store.Params{Algorithm: store.Quota, Limit: 5, Period: store.Day}}}})
	require.True(t, d.Allowed)
	assert.Equal(t, 24*time.Hour, d.Window)
	assert.Equal(t, 24*time.Hour, d.Applied[0].Window)
	assert.LessOrEqual(t, d.Reset, d.Window)
}
