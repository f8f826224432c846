package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePhases(t *testing.T) {
	ps, err := parsePhases("warm:10s:P=20,S=5,F=1;spike:2s:F=1000:http://127.0.0.1:1/x?y=1")
	require.NoError(t, err)
	require.Len(t, ps, 2)
	assert.Equal(t, [3]float64{20, 5, 1}, ps[0].rates)
	assert.Equal(t, 2*time.Second, ps[1].duration)
	assert.Equal(t, "http://127.0.0.1:1/x?y=1", ps[1].hook)
	for _, bad := range []string{"x", "a:zz:P=1", "a:1s:Q=1", "a:1s:P=-1"} {
		_, err := parsePhases(bad)
		assert.Error(t, err, bad)
	}
}

func TestTallyAndQuantile(t *testing.T) {
	tl := &tally{firstShed: -1}
	tl.add(200, false, 10*time.Millisecond, 0)
	tl.add(200, false, 30*time.Millisecond, 0)
	tl.add(429, true, time.Millisecond, 2*time.Second)
	tl.add(503, true, time.Millisecond, time.Second)
	tl.add(503, false, time.Millisecond, 0)
	tl.add(0, false, 0, 0)
	assert.EqualValues(t, 2, tl.ok)
	assert.EqualValues(t, 1, tl.limited)
	assert.EqualValues(t, 1, tl.shed)
	assert.EqualValues(t, 1, tl.upstream5xx)
	assert.EqualValues(t, 1, tl.errors)
	assert.Equal(t, time.Second, tl.firstShed)
	assert.Equal(t, 30*time.Millisecond, quantile(tl.latencies, 0.99))
	assert.Equal(t, time.Duration(0), quantile(nil, 0.5))
}
