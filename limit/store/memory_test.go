package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func memLease(t *testing.T, s *MemoryStore, key string, p Params, want int64, ttl time.Duration) LeaseResult {
	t.Helper()
	r, err := s.Lease(context.Background(), &LeaseRequest{Key: []byte(key), Params: p, Want: want, LeaseTTL: ttl})
	require.NoError(t, err)
	return r
}

// TestMemoryStoreClockBackwards: a clock that moves backwards (an NTP step)
// must not corrupt counts; the store keeps the newest time it saw.
func TestMemoryStoreClockBackwards(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := newConfClock()
			s := NewMemoryStore(MemoryOptions{Now: clock.Now})
			defer s.Close()
			p := confParams(alg, 4, time.Second)
			require.Equal(t, int64(2), memLease(t, s, "k", p, 2, 0).Granted)
			clock.Advance(-10 * time.Second)
			r := memLease(t, s, "k", p, 5, 0)
			assert.Equal(t, int64(2), r.Granted, "the clock went back: the earlier grants still count, no more")
			r = memLease(t, s, "k", p, 1, 0)
			assert.Equal(t, int64(0), r.Granted)
			assert.Positive(t, r.RetryAfter)
			assert.LessOrEqual(t, r.RetryAfter, time.Second+time.Second/20)
			clock.Advance(10*time.Second + 2*time.Second) // back past the newest time
			assert.Equal(t, int64(4), memLease(t, s, "k", p, 5, 0).Granted)
		})
	}
}

func TestMemoryStoreMaxKeys(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 256})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 10, Window: time.Minute}
	for i := 0; i < 5000; i++ {
		memLease(t, s, fmt.Sprintf("key-%d", i), p, 1, 0)
	}
	assert.LessOrEqual(t, s.Len(), 256)
	assert.Positive(t, s.Len())
}

func TestMemoryStoreSweep(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, SweepInterval: time.Millisecond})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 10, Window: 100 * time.Millisecond}
	for i := 0; i < 100; i++ {
		memLease(t, s, fmt.Sprintf("key-%d", i), p, 1, 0)
	}
	require.Equal(t, 100, s.Len())
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool { return s.Len() == 0 }, 5*time.Second, time.Millisecond, "idle keys were not evicted")
}

// TestMemoryStoreExpiredKeyStartsAfresh: an expired key is whole again even
// before the sweeper runs.
func TestMemoryStoreExpiredKeyStartsAfresh(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, SweepInterval: time.Hour})
	defer s.Close()
	p := Params{Algorithm: TokenBucket, Capacity: 3, RefillRate: 1}
	require.Equal(t, int64(3), memLease(t, s, "k", p, 3, 0).Granted)
	clock.Advance(time.Hour)
	assert.Equal(t, int64(3), memLease(t, s, "k", p, 5, 0).Granted)
}

func TestMemoryStoreCloseIdempotent(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	s.Close()
	s.Close()
	assert.NoError(t, s.Ping(context.Background()))
	_, err := s.Lease(context.Background(), &LeaseRequest{Key: []byte("k"), Params: Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Second}, Want: 1})
	assert.NoError(t, err, "Lease works after Close")
}

func TestMemoryStoreCanceledContext(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Lease(ctx, &LeaseRequest{Key: []byte("k"), Params: Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Second}, Want: 1})
	assert.ErrorIs(t, err, context.Canceled)
}
