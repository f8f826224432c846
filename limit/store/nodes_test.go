package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHashSlot: Redis Cluster's key slots (the cluster specification's
// CRC16 test vector, and hash tags).
func TestHashSlot(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16([]byte("123456789")))
	assert.Equal(t, hashSlot([]byte("user1000")), hashSlot([]byte("{user1000}.following")))
	assert.Equal(t, hashSlot([]byte("user1000")), hashSlot([]byte("sentinel:{user1000}:sw")))
	assert.Equal(t, crc16([]byte("foo{}{bar}"))%clusterSlots, hashSlot([]byte("foo{}{bar}")), "an empty tag: the whole key")
	assert.Equal(t, hashSlot([]byte("{bar")), crc16([]byte("{bar"))%clusterSlots, "no closing brace: the whole key")
	assert.Equal(t, uint16(12182), hashSlot([]byte("foo")))
}

// TestClockPerNode: each node's clock is learned from its own answers and
// a call's deadline is sent in the clock of its key's node; a node not yet
// heard from, or a key whose node is not known yet, gets no deadline.
func TestClockPerNode(t *testing.T) {
	nodes := &storeNodes{cluster: true}
	nodes.busy.Store(true) // no read of the slot map: the test sets it
	s := &RedisStore{nodes: nodes}
	keyA, keyB, keyC := []byte("{a}"), []byte("{b}"), []byte("{c}")
	assert.Nil(t, s.clockOf(keyA), "a key of a cluster whose slot map is not read has no node yet")

	m := &slotMap{at: time.Now()}
	m.node[hashSlot(keyA)], m.node[hashSlot(keyB)], m.node[hashSlot(keyC)] = 1, 2, 3
	nodes.slots.Store(m)
	sent := time.Now()
	got := sent.Add(2 * time.Millisecond)
	mid := sent.Add(time.Millisecond).UnixMicro()
	s.clockOf(keyA).learn(sent, got, mid+int64(time.Second/time.Microsecond)) // node 1 runs 1 s ahead
	s.clockOf(keyB).learn(sent, got, mid-int64(time.Second/time.Microsecond)) // node 2 runs 1 s behind

	ctx, cancel := context.WithDeadline(context.Background(), sent.Add(100*time.Millisecond))
	defer cancel()
	local := sent.Add(75 * time.Millisecond).UnixMicro() // the deadline less a quarter of the time left
	assert.Equal(t, local+1_000_000, s.clockOf(keyA).deadline(ctx, sent, 0), "node 1's deadline in node 1's clock")
	assert.Equal(t, local-1_000_000, s.clockOf(keyB).deadline(ctx, sent, 0), "node 2's deadline in node 2's clock")
	assert.Zero(t, s.clockOf(keyC).deadline(ctx, sent, 0), "node 3 has not answered yet: no deadline")
	assert.Zero(t, (*nodeClock)(nil).deadline(ctx, sent, 0), "no node: no deadline")

	// Later answers move a node's offset toward them, not the others'.
	s.clockOf(keyA).learn(sent, got, mid+int64(time.Second/time.Microsecond)+8000)
	assert.Equal(t, local+1_001_000, s.clockOf(keyA).deadline(ctx, sent, 0))
	assert.Equal(t, local-1_000_000, s.clockOf(keyB).deadline(ctx, sent, 0))

	// One Redis: every key is node 0's.
	single := &RedisStore{nodes: &storeNodes{}}
	assert.Same(t, &single.clocks[0], single.clockOf(keyB))
}
