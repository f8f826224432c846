package adaptive

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exposed counts the lines of the process's /metrics output that are
// exactly sample.
func exposed(sample string) int {
	var b bytes.Buffer
	metrics.WritePrometheus(&b, false)
	n := 0
	for line := range strings.SplitSeq(b.String(), "\n") {
		if line == sample {
			n++
		}
	}
	return n
}

// TestMetricsPerController: two controllers in one process keep their own
// series, and a stopped one's series are gone.
func TestMetricsPerController(t *testing.T) {
	opts := Options{PodID: "p", Upstreams: []string{"metrics_test"}}
	a, err := New(provisioned(Config{}), opts)
	require.NoError(t, err)
	b, err := New(provisioned(Config{}), opts)
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	a.local, b.local = 0.8125, 0.3125
	for range 3 {
		_, ok := a.Concurrency("metrics_test").Acquire(PriorityPremium, 0)
		require.True(t, ok)
	}
	_, ok := b.Concurrency("metrics_test").Acquire(PriorityPremium, 0)
	require.True(t, ok)

	const (
		aLocal    = `sentinel_adaptive_pressure{scope="local"} 0.8125`
		bLocal    = `sentinel_adaptive_pressure{scope="local"} 0.3125`
		aInflight = `sentinel_concurrency_inflight{upstream="metrics_test"} 3`
		bInflight = `sentinel_concurrency_inflight{upstream="metrics_test"} 1`
	)
	assert.Equal(t, 1, exposed(aLocal))
	assert.Equal(t, 1, exposed(bLocal))
	assert.Equal(t, 1, exposed(aInflight))
	assert.Equal(t, 1, exposed(bInflight))

	a.Stop()
	assert.Zero(t, exposed(aLocal), "a stopped controller's series are gone")
	assert.Zero(t, exposed(aInflight))
	assert.Equal(t, 1, exposed(bLocal))
	assert.Equal(t, 1, exposed(bInflight))
}
