package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryStoreFullKeepsLiveKeys: a store full of live keys drops none of
// them for new keys: exhausted keys stay refused through a flood of new
// ones, the flood gets at most the room left plus one limit per scope (the
// shared overflow entry), and the store holds no more than MaxKeys.
func TestMemoryStoreFullKeepsLiveKeys(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := newConfClock()
			const maxKeys, limit = 4096, 5
			s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: maxKeys, SweepInterval: time.Hour})
			defer s.Close()
			p := confParams(alg, limit, time.Hour)
			for i := range 200 {
				require.Equal(t, int64(limit), memLease(t, s, fmt.Sprintf("{ip:held-%d}", i), p, limit, 0).Granted)
			}
			granted := int64(0)
			for i := range 50_000 {
				granted += memLease(t, s, fmt.Sprintf("{ip:flood-%d}", i), p, 1, 0).Granted
			}
			assert.LessOrEqual(t, s.Len(), maxKeys)
			assert.LessOrEqual(t, granted, int64(maxKeys-200+limit), "the flood got more than the room left and one limit")
			for i := range 200 {
				r := memLease(t, s, fmt.Sprintf("{ip:held-%d}", i), p, 1, 0)
				require.Zero(t, r.Granted, "exhausted key %d was forgotten", i)
			}
			// Another scope has its own overflow entry: the ip flood does
			// not use up a new tenant's budget.
			assert.Equal(t, int64(1), memLease(t, s, "{tenant:new}", p, 1, 0).Granted)
			// The shared entry grants no lease beyond the need.
			assert.Equal(t, int64(1), memLease(t, s, "{tenant:other}", p, 3, 0).Granted)
		})
	}
}

// TestMemoryStoreExpiredKeysMakeRoom: once the held keys expire, new keys
// get their own entries again instead of the shared one.
func TestMemoryStoreExpiredKeysMakeRoom(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 256, SweepInterval: time.Hour})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 2, Window: time.Second}
	for i := range 5000 {
		memLease(t, s, fmt.Sprintf("{ip:a-%d}", i), p, 1, 0)
	}
	require.Zero(t, memLease(t, s, "{ip:late}", p, 1, 0).Granted+memLease(t, s, "{ip:late2}", p, 1, 0).Granted,
		"the shared entry is used up")
	clock.Advance(time.Minute)
	assert.Equal(t, int64(2), memLease(t, s, "{ip:b}", p, 2, 0).Granted, "an expired key made room for a key of its own")
	assert.LessOrEqual(t, s.Len(), 256)
}

// TestMemoryStoreOverflowIgnoresReturns: a return sent with a key decided
// by the shared entry does not give budget back to it.
func TestMemoryStoreOverflowIgnoresReturns(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 1, SweepInterval: time.Hour})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 3, Window: time.Hour}
	granted, ref := int64(0), int64(0)
	for i := range 2000 {
		key := []byte(fmt.Sprintf("{ip:%d}", i))
		r, err := s.Lease(t.Context(), &LeaseRequest{Key: key, Params: p, Want: 1, Return: 1, ReturnRef: ref})
		require.NoError(t, err)
		granted += r.Granted
		if r.Granted > 0 {
			ref = r.Ref
		}
	}
	assert.LessOrEqual(t, granted, int64(memoryShards+3))
}

func TestKeyScope(t *testing.T) {
	for key, want := range map[string]string{
		"{ip:10.0.0.1}":        "ip",
		"p:{tenant:acme}":      "tenant",
		"{rule:acme:bids}":     "rule",
		"{tenant}":             "tenant",
		"no-tag":               "no-tag",
		"sentinel:{key:a%3Ab}": "key",
	} {
		assert.Equal(t, want, string(keyScope([]byte(key))), key)
	}
}

// TestMemoryStoreOverflowTableFull: when even the shared entries are all
// live (a flood over thousands of distinct limits), new keys are refused
// with a retry-after, and the table stays bounded.
func TestMemoryStoreOverflowTableFull(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 1, SweepInterval: time.Hour})
	defer s.Close()
	for i := range 5000 { // every shard full
		memLease(t, s, fmt.Sprintf("{ip:fill-%d}", i), Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Hour}, 1, 0)
	}
	refused := 0
	for i := range maxOverflowEntries + 500 {
		p := Params{Algorithm: SlidingWindow, Limit: int64(1000 + i), Window: time.Hour}
		r := memLease(t, s, fmt.Sprintf("{ip:new-%d}", i), p, 1, 0)
		if r.Granted == 0 {
			refused++
			assert.Positive(t, r.RetryAfter)
		}
	}
	assert.GreaterOrEqual(t, refused, 500)
	assert.LessOrEqual(t, s.overflow.len(), maxOverflowEntries)
	clock.Advance(2 * time.Hour)
	assert.Equal(t, int64(1), memLease(t, s, "{ip:after}", Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Hour}, 1, 0).Granted,
		"expired entries make room again")
}
