package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemorySlotsFullStore: a full MemoryStore evicts a key of slots that
// has free slots for a new key, keeps one whose slots are all taken (up to
// twice its share), and then refuses a new key with ErrNoRoom; a call that
// takes nothing makes no entry.
func TestMemorySlotsFullStore(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 1, Shards: 1, SweepInterval: time.Hour})
	defer s.Close()
	ctx := context.Background()
	take := func(key string, limit, want int64) (SlotResult, error) {
		return s.Slots(ctx, slotReq(key, "a", limit, want, time.Minute))
	}
	r, err := take("{s:free}", 5, 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Granted)
	r, err = take("{s:full}", 1, 1) // evicts {s:free}, which had free slots
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Granted)
	assert.Equal(t, 1, s.Len())
	r, err = take("{s:grown}", 1, 1) // {s:full} is kept: the shard grows
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Granted)
	assert.Equal(t, 2, s.Len())
	_, err = take("{s:refused}", 1, 1)
	assert.ErrorIs(t, err, ErrNoRoom)
	r, err = take("{s:look}", 1, 0)
	require.NoError(t, err)
	assert.Equal(t, SlotResult{}, r)
	r, err = take("{s:full}", 1, 1)
	require.NoError(t, err)
	assert.Equal(t, SlotResult{Held: 1, InUse: 1}, r, "the full key kept its lease")
	clock.Advance(time.Minute)
	r, err = take("{s:refused}", 1, 1) // the leases expired: room again
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Granted)
}

// TestMemorySlotsKeyApart: a key's slots and its leases are counted apart.
func TestMemorySlotsKeyApart(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	defer s.Close()
	ctx := context.Background()
	key := "{s:apart}"
	p := Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Minute}
	l, err := s.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 1})
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Granted)
	r, err := s.Slots(ctx, slotReq(key, "a", 1, 1, time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Granted)
	l, err = s.Lease(ctx, &LeaseRequest{Key: []byte(key), Params: p, Want: 1})
	require.NoError(t, err)
	assert.Zero(t, l.Granted, "the window's count survived the slots")
}
