package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestBatchedCallsAnswerAsAlone: calls that come while Redis is paused
// queue behind the one on its way and go together as one script call when
// it resumes; each key of every algorithm is answered as alone: 10 of 12
// permits granted, in order, and a refusal that says when to retry. A
// call of a key holding another type fails alone; the batch's other calls
// are answered.
func TestBatchedCallsAnswerAsAlone(t *testing.T) {
	srv := redistest.Start(t)
	client := confClient(t, []string{srv.Addr})
	s := NewRedisStore(client, RedisStoreOptions{})
	ctx := context.Background()
	params := []Params{
		{Algorithm: SlidingWindow, Limit: 10, Window: time.Hour},
		{Algorithm: SlidingLog, Limit: 10, Window: time.Hour},
		{Algorithm: TokenBucket, Capacity: 10, RefillRate: 0.0001},
		{Algorithm: Quota, Limit: 10, Period: Day, Zone: time.UTC},
	}
	for _, p := range params { // the scripts loaded, the node's clock known
		_, err := s.Lease(ctx, &LeaseRequest{Key: []byte("{warm}" + p.Algorithm.String()), Params: p, Want: 1})
		require.NoError(t, err)
	}
	require.NoError(t, client.Do(ctx, client.B().Set().Key("{wrong}:sw").Value("x").Build()).Error())
	before, _ := scriptStats(t, client)

	const keys = 8 // per algorithm
	srv.Pause()
	var wg sync.WaitGroup
	got := make([][]LeaseResult, len(params)*keys)
	for i := range got {
		p := params[i/keys]
		wg.Go(func() {
			for range 12 {
				res, err := s.Lease(ctx, &LeaseRequest{Key: []byte(fmt.Sprintf("{b%d}", i)), Params: p, Want: 1})
				require.NoError(t, err)
				got[i] = append(got[i], res)
			}
		})
	}
	wrong := make(chan error, 1)
	go func() {
		_, err := s.Lease(ctx, &LeaseRequest{Key: []byte("{wrong}"), Params: params[0], Want: 1})
		wrong <- err
	}()
	time.Sleep(300 * time.Millisecond) // every caller queued behind the first
	srv.Resume()
	wg.Wait()
	assert.ErrorContains(t, <-wrong, "WRONGTYPE")

	for i, answers := range got {
		name := params[i/keys].Algorithm.String()
		granted := 0
		for j, a := range answers {
			granted += int(a.Granted)
			if j < 10 {
				assert.Equal(t, int64(1), a.Granted, "%s key %d call %d", name, i, j)
				assert.Equal(t, int64(9-j), a.Remaining, "%s key %d call %d", name, i, j)
			} else {
				assert.Zero(t, a.Granted, "%s key %d call %d", name, i, j)
				assert.Positive(t, a.RetryAfter, "%s key %d call %d", name, i, j)
			}
		}
		assert.Equal(t, 10, granted, "%s key %d", name, i)
	}
	after, _ := scriptStats(t, client)
	calls := after - before
	leases := int64(len(got)*12 + 1)
	t.Logf("%d leases in %d script calls", leases, calls)
	assert.Less(t, calls, leases, "calls went together")
}
