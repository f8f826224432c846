package breaker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// namedNodes is a cluster of n nodes whose keys are their node's index.
type namedNodes int

func (n namedNodes) NodeOf(key []byte) int { return int(key[0]) }

func (n namedNodes) NodeName(i int) string {
	if i < int(n) {
		return string(rune('a' + i))
	}
	return ""
}

// TestSetFailing: a set is failing while no node's breaker is closed, so a
// pod whose one node failed still publishes its heartbeats while a pod cut
// off from every node does not; a closed breaker (a probe that went
// through) ends it.
func TestSetFailing(t *testing.T) {
	open := func(s *Set, key byte) {
		for range 3 {
			s.For([]byte{key}).Failure(false, time.Now().UnixNano())
		}
	}
	one := NewSet(3, time.Second, nil)
	defer one.Close()
	assert.False(t, one.Failing())
	open(one, 0)
	assert.True(t, one.Failing())
	one.For([]byte{0}).Success(true)
	assert.False(t, one.Failing())

	three := NewSet(3, time.Second, namedNodes(3))
	defer three.Close()
	open(three, 0)
	open(three, 1)
	assert.False(t, three.Failing(), "node c still answers")
	open(three, 2)
	assert.True(t, three.Failing())
	three.For([]byte{1}).Success(true)
	assert.False(t, three.Failing())
}
