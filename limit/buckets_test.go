package limit

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBucketTableFloodKeepsBucketsThatHoldState: a flood of new keys into
// a full table drops only buckets that hold nothing. Buckets with leased
// permits, permits to give back, unreported local admissions or a call in
// flight stay; when nothing can be dropped the new key gets a bucket that
// is not kept, and the table stays within its bound.
func TestBucketTableFloodKeepsBucketsThatHoldState(t *testing.T) {
	const maxKeys = 4 * bucketShards
	tab := newBucketTable(maxKeys)
	now := int64(1)
	held := map[string]*bucket{}
	for i := range maxKeys {
		key := fmt.Sprintf("{ip:held-%d}", i)
		b := tab.get([]byte(key), now)
		switch i % 5 {
		case 0:
			b.permits = 3
		case 1:
			b.expired = 2
		case 2:
			b.own[0] = 1
		case 3:
			b.fill = &fill{done: make(chan struct{})}
		case 4:
			b.late.Add(1)
		}
		if tab.get([]byte(key), now) == b { // kept: its shard had room
			held[key] = b
		}
	}
	require.Greater(t, len(held), maxKeys/2)
	require.Equal(t, len(held), tab.len())
	unkept := 0
	for i := range 20_000 {
		key := fmt.Sprintf("{ip:flood-%d}", i)
		b := tab.get([]byte(key), now)
		if tab.get([]byte(key), now) != b {
			unkept++
		}
	}
	assert.Positive(t, unkept, "full shards of buckets that hold state keep no new bucket")
	assert.LessOrEqual(t, tab.len(), maxKeys)
	for key, b := range held {
		require.Same(t, b, tab.get([]byte(key), now), "the bucket of %s was dropped", key)
	}

	// Buckets that hold nothing make room for new keys.
	for _, b := range held {
		b.permits, b.expired, b.own, b.fill = 0, 0, [ownSlots]int64{}, nil
		b.late.Store(0)
	}
	for i := range 20_000 {
		key := []byte(fmt.Sprintf("{ip:again-%d}", i))
		require.Same(t, tab.get(key, now), tab.get(key, now), "a bucket that holds nothing was not dropped for %s", key)
	}
	assert.LessOrEqual(t, tab.len(), maxKeys)
}
