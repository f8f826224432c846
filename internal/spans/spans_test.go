package spans

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestBusiest: a span that ends past an interval counts only as touching it.
func TestBusiest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(from, to time.Duration) Span { return Span{t0.Add(from), t0.Add(to)} }
	spans := []Span{
		at(500*time.Millisecond, 600*time.Millisecond),
		at(0, time.Millisecond),
		at(900*time.Millisecond, 1100*time.Millisecond), // decided in the first second or the next
		at(1600*time.Millisecond, 1700*time.Millisecond),
	}
	certain, start, touching := Busiest(spans, time.Second)
	assert.Equal(t, 2, certain)
	assert.Equal(t, t0, start)
	assert.Equal(t, 3, touching)
}
