package store

import (
	"testing"

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
