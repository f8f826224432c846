package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryStoreFloodKeepsExhaustedServesNew: 6,000 new keys past
// MaxKeys (1,024) neither free the 50 exhausted keys nor refuse 50 keys
// never seen: each of those gets its whole limit, its own budget; the store
// holds no more than twice MaxKeys.
func TestMemoryStoreFloodKeepsExhaustedServesNew(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, SlidingLog, TokenBucket, Quota} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := newConfClock()
			const maxKeys, limit, held = 1024, 5, 50
			const flood = maxKeys + 6000
			s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: maxKeys, SweepInterval: time.Hour})
			defer s.Close()
			p := confParams(alg, limit, time.Hour)
			if alg == Quota {
				p = Params{Algorithm: Quota, Limit: limit, Period: Day}
			}
			for i := range held {
				require.Equal(t, int64(limit), memLease(t, s, fmt.Sprintf("{p:u:held-%d}", i), p, limit, 0).Granted)
			}
			for i := range flood {
				require.Equal(t, int64(1), memLease(t, s, fmt.Sprintf("{p:u:flood-%d}", i), p, 1, 0).Granted, "flood key %d", i)
			}
			assert.LessOrEqual(t, s.Len(), 2*maxKeys)
			for i := range held {
				r := memLease(t, s, fmt.Sprintf("{p:u:held-%d}", i), p, 1, 0)
				require.Zero(t, r.Granted, "exhausted key %d was forgotten", i)
				assert.False(t, r.NoRoom)
			}
			for i := range 50 {
				r := memLease(t, s, fmt.Sprintf("{p:u:new-%d}", i), p, limit, 0)
				require.Equal(t, int64(limit), r.Granted, "new key %d did not get its own limit", i)
			}
		})
	}
}

// sameShardKeys returns n keys that fall in one shard.
func sameShardKeys(n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("{p:u:%d}", i)
		if xxhash.Sum64String(k)%memoryShards == 0 { // shard 0 of any power of two

			keys = append(keys, k)
		}
	}
	return keys
}

// TestMemoryStoreEvictionOrder: in a full shard (one key per shard), a key
// whose budget is whole goes first, then the least used key that is not
// exhausted; exhausted keys stay, the shard growing to twice its share for
// them; past that a new key is refused for want of room, charged to
// nothing, until a key expires.
func TestMemoryStoreEvictionOrder(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: memoryShards, Shards: memoryShards, SweepInterval: time.Hour})
	defer s.Close()
	p := Params{Algorithm: TokenBucket, Capacity: 5, RefillRate: 1}
	k := sameShardKeys(7)
	sh := &s.shards[0]
	require.Equal(t, int64(1), memLease(t, s, k[0], p, 1, 0).Granted)
	clock.Advance(2 * time.Second) // k[0] refilled: whole again, not expired
	require.Equal(t, int64(5), memLease(t, s, k[1], p, 5, 0).Granted)
	assert.NotContains(t, sh.m, k[0], "the whole key made room")
	require.Equal(t, int64(2), memLease(t, s, k[2], p, 2, 0).Granted) // k[1] exhausted: grown to 2
	assert.Len(t, sh.m, 2)
	require.Equal(t, int64(1), memLease(t, s, k[3], p, 1, 0).Granted)
	assert.NotContains(t, sh.m, k[2], "the least used key that was not exhausted went")
	assert.Contains(t, sh.m, k[1], "the exhausted key stays")
	require.Equal(t, int64(4), memLease(t, s, k[3], p, 4, 0).Granted) // k[3] exhausted too
	r := memLease(t, s, k[4], p, 1, 0)
	assert.True(t, r.NoRoom)
	assert.Zero(t, r.Granted)
	assert.Equal(t, time.Second, r.RetryAfter)
	assert.Zero(t, memLease(t, s, k[1], p, 1, 0).Granted, "exhausted keys stay refused")
	assert.Zero(t, memLease(t, s, k[3], p, 1, 0).Granted, "exhausted keys stay refused")
	clock.Advance(10 * time.Second) // whole again
	assert.Equal(t, int64(5), memLease(t, s, k[4], p, 5, 0).Granted, "room again, with a budget of its own")
	assert.LessOrEqual(t, len(sh.m), 2)
}

// TestMemoryStoreLowerMaxKeys: lowering MaxKeys drops no key at once; the
// shard evicts one key per new key, so it never grows.
func TestMemoryStoreLowerMaxKeys(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 4 * memoryShards, SweepInterval: time.Hour})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 5, Window: time.Hour}
	for i := range 4000 {
		memLease(t, s, fmt.Sprintf("{p:u:a-%d}", i), p, 1, 0)
	}
	before := s.Len()
	s.SetMaxKeys(memoryShards)
	for i := range 4000 {
		require.Equal(t, int64(1), memLease(t, s, fmt.Sprintf("{p:u:b-%d}", i), p, 1, 0).Granted)
	}
	assert.LessOrEqual(t, s.Len(), before)
}

// TestMemoryStoreLocalShareNeverFull: the limiter's local share keeps no
// key for being exhausted: a table full of used-up shares drops the least
// used for a new key, and never refuses one for want of room.
func TestMemoryStoreLocalShareNeverFull(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: memoryShards, Shards: memoryShards, SweepInterval: time.Hour, Role: RoleLocalShare})
	defer s.Close()
	k := sameShardKeys(20)
	share := Params{Algorithm: SlidingWindow, Limit: 1, Window: time.Hour}
	for _, key := range k {
		r := memLease(t, s, key, share, 1, 0)
		require.Equal(t, int64(1), r.Granted, "a new key gets its share")
		require.False(t, r.NoRoom)
	}
	assert.Len(t, s.shards[0].m, 1)
}

// TestMemoryStoreSmallTableKeepsBusyKey: a small table (MaxKeys 100, a
// limiter's local share) flooded by 10,000 new keys of one permit each
// keeps the count of a busy key that used 6 of its 10: its shard holds 16
// keys or more, and a key of one permit is always less used. (With a shard
// per key or two, the flood evicted the busy key whenever a new key hashed
// next to it, and the key got its share again.)
func TestMemoryStoreSmallTableKeepsBusyKey(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 100, SweepInterval: time.Hour, Role: RoleLocalShare})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 10, Window: time.Hour}
	require.Equal(t, int64(6), memLease(t, s, "{p:busy}", p, 6, 0).Granted)
	for i := range 10_000 {
		require.Equal(t, int64(1), memLease(t, s, fmt.Sprintf("{p:u:flood-%d}", i), p, 1, 0).Granted)
	}
	assert.LessOrEqual(t, s.Len(), 100)
	assert.Equal(t, int64(4), memLease(t, s, "{p:busy}", p, 10, 0).Granted, "the busy key kept its count")
}

// TestMemoryStoreFloodKeepsAKeyInUse: a limiter's local share of 4 a
// second (MaxKeys 100), for a key asked for every 80 ms for a second and
// then idle, while new keys of one permit each arrive 25 at a time between
// its requests. At the start of each burst the key has used one permit,
// as many as a flood key: the flood's older keys go first, and the key
// keeps its count, 4 in any second. (Evicted on that tie, it got its share
// again within the second: a heavy user of a random fault schedule got 5
// in a second on one pod, during a key flood and a store outage.)
func TestMemoryStoreFloodKeepsAKeyInUse(t *testing.T) {
	clock := newConfClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 100, SweepInterval: time.Hour, Role: RoleLocalShare})
	defer s.Close()
	p := Params{Algorithm: SlidingWindow, Limit: 4, Window: time.Second}
	const step = 80 * time.Millisecond
	var granted []time.Duration // when the key got a permit, from the start
	flood := 0
	for i := range 400 {
		if i%25 < 13 && memLease(t, s, "{p:busy}", p, 1, 0).Granted == 1 { // 13 requests, then 12 steps idle
			granted = append(granted, time.Duration(i)*step)
		}
		for range 25 {
			memLease(t, s, fmt.Sprintf("{p:u:flood-%d}", flood), p, 1, 0)
			flood++
		}
		clock.Advance(step)
	}
	most := 0
	for i, at := range granted {
		n := 0
		for _, b := range granted[i:] {
			if b-at < time.Second {
				n++
			}
		}
		most = max(most, n)
	}
	assert.LessOrEqual(t, most, 4, "the key got its share again in a second")
	assert.GreaterOrEqual(t, len(granted), 4*400/25, "the key got less than its share")
}
