package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRows(t *testing.T) {
	rows, err := parseRows("flood, hot")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, "flood", rows[0].name)
	assert.Equal(t, 100, rows[0].limit)
	assert.Equal(t, "hot", rows[1].name)
	_, err = parseRows("hot,10k")
	assert.ErrorContains(t, err, `no row "10k"`)
}

func TestRequestValues(t *testing.T) {
	r := allRows[1] // 100k
	assert.Equal(t, "5", request(r, 100_005).Descriptors[0].Entries[0].Value)
	assert.Equal(t, "user", request(r, 1).Descriptors[0].Entries[0].Key)
	assert.Equal(t, "1", request(allRows[0], 12345).Descriptors[0].Entries[0].Value, "hot: one value")
}

func TestCheckBody(t *testing.T) {
	assert.Equal(t, `{"tenant_id":"bench","resource":"default","key":"user-5"}`, checkBody(allRows[1], 100_005))
	assert.Equal(t, `{"tenant_id":"bench","resource":"default","key":"flood-1"}`, checkBody(allRows[3], 7), "flood: one key")
}

func TestClientIP(t *testing.T) {
	assert.Equal(t, "10.1.134.159", clientIP(allRows[1], 99_999+100_000))
	assert.Equal(t, "10.15.66.63", clientIP(allRows[2], 999_999))
	assert.Equal(t, "10.0.0.1", clientIP(allRows[3], 7), "flood: one client")
}

func TestMediansAndRatios(t *testing.T) {
	assert.Equal(t, 0.0, medianOf(nil))
	assert.Equal(t, 2.0, medianOf([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, medianOf([]float64{4, 1, 2, 3}))
	a := []measure{{calls: 300, seconds: 1}, {calls: 200, seconds: 1}, {calls: 100, seconds: 1}}
	b := []measure{{calls: 100, seconds: 1}, {calls: 100, seconds: 1}, {calls: 100, seconds: 1}}
	assert.Equal(t, 2.0, ratio(a, b, measure.perSecond), "round by round, then the median")
}

func TestOwnCPUAndMemory(t *testing.T) {
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	c, err := cpu(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, c, "%d", x)
	m, err := rss(os.Getpid())
	require.NoError(t, err)
	assert.Greater(t, m, int64(1<<20))
}
