package rls

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// callCounter counts the lease calls that reach a store.
type callCounter struct {
	store.Store
	calls atomic.Int64
}

func (c *callCounter) Lease(ctx context.Context, req *store.LeaseRequest) (store.LeaseResult, error) {
	c.calls.Add(1)
	return c.Store.Lease(ctx, req)
}

// TestFloodedDescriptorGetsItsLimit: a descriptor of a files rule (20 a
// second) flooded by 8 callers on a real redis-server gets its limit over
// the flood, never more in any second, and the refused calls are answered
// from what the pod knows: the store said until when nothing frees. (A
// single refused hit used to look at the budget: a store call per refusal,
// which took the permits that had freed since, and the flood got 87% of
// its limit here, 25% at 100 a second.)
func TestFloodedDescriptorGetsItsLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	const perSecond, callers, flood = 20, 8, 3 * time.Second
	st := &callCounter{Store: redisStore(t, "flood")}
	lim, cat := filesLimiter(t, st, limit.Options{}, nil)
	c := rlsv3.NewRateLimitServiceClient(start(t, Config{ConfigFiles: []string{"testdata/flood.yaml"}}, lim, cat))
	req := &rlsv3.RateLimitRequest{Domain: "flood", Descriptors: descs(descriptor("client", "c1"))}

	var (
		mu      sync.Mutex
		spans   [][2]time.Time // of the OK answers: sent, answered
		refused atomic.Int64
		wg      sync.WaitGroup
	)
	calls0 := st.calls.Load()
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < flood {
				sent := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), req)
				if !assert.NoError(t, err) {
					return
				}
				if resp.OverallCode != rlsv3.RateLimitResponse_OK {
					refused.Add(1)
					continue
				}
				mu.Lock()
				spans = append(spans, [2]time.Time{sent, time.Now()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	calls := st.calls.Load() - calls0
	// Every second holds at most the limit: the OK answers decided within
	// it (sent and answered in it) are no more.
	for _, s := range spans {
		in := 0
		for _, o := range spans {
			if !o[0].Before(s[0]) && !o[1].After(s[0].Add(time.Second)) {
				in++
			}
		}
		require.LessOrEqual(t, in, perSecond, "OK answers in the second from %s", s[0].Sub(start))
	}
	// The limit is used: the flood gets about 20 a second (the first second
	// whole, then what frees as the window slides), not a few.
	want := int(flood / time.Second * perSecond)
	assert.GreaterOrEqual(t, len(spans), want*9/10, "OK answers in %s of flood", flood)
	t.Logf("flood: %d OK, %d refused, %d store calls (%.4f per refusal)", len(spans), refused.Load(), calls, float64(calls)/float64(refused.Load()))
	// A refusal remembered until the next permit can free (at most 50ms)
	// and the marker's, then one call for every caller waiting: the calls
	// are bounded by time, not by the refusals (one each before, 10,000
	// and more here).
	assert.LessOrEqual(t, int(calls), len(spans)+int(100*flood/time.Second), "store calls: the grants and 100 a second")
}
