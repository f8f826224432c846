package breaker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestProbeNow: a store known to answer again ends an open breaker's
// cooldown, so the next call probes; a closed breaker stays closed.
func TestProbeNow(t *testing.T) {
	s := NewSet(2, time.Hour, nil)
	defer s.Close()
	b := s.For(nil)
	now := time.Now().UnixNano()
	b.Failure(false, now)
	b.Failure(false, now)
	ok, _ := b.Allow(now + 1)
	assert.False(t, ok, "open, in its cooldown")
	s.ProbeNow()
	ok, probe := b.Allow(now + 2)
	assert.True(t, ok && probe, "the next call probes")
	b.Success(probe)
	s.ProbeNow()
	assert.Equal(t, Closed, b.State())
}
