package latency

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecisionSecondsTwin(t *testing.T) {
	s := metrics.NewSet()
	h := s.NewPrometheusHistogramExt(`rate_limit_latency_ms`, bucketsMS)
	for _, ms := range []float64{0.003, 0.04, 0.04, 0.7, 3, 400} {
		h.Update(ms)
	}
	var ms bytes.Buffer
	s.WritePrometheus(&ms)
	got := string(msToSeconds(ms.Bytes()))
	for _, line := range []string{
		`sentinel_limit_decision_duration_seconds_bucket{le="5e-06"} 1`,
		`sentinel_limit_decision_duration_seconds_bucket{le="5e-05"} 3`,
		`sentinel_limit_decision_duration_seconds_bucket{le="0.001"} 4`,
		`sentinel_limit_decision_duration_seconds_bucket{le="0.1"} 5`,
		`sentinel_limit_decision_duration_seconds_bucket{le="+Inf"} 6`,
		`sentinel_limit_decision_duration_seconds_count 6`,
	} {
		assert.Contains(t, got, line+"\n")
	}
	assert.NotContains(t, got, "rate_limit_latency_ms")
	var sum string
	for _, l := range strings.Split(got, "\n") {
		if v, ok := strings.CutPrefix(l, "sentinel_limit_decision_duration_seconds_sum "); ok {
			sum = v
		}
	}
	assert.Equal(t, "0.403783", sum, "the sum in seconds")
	assert.Equal(t, strings.Count(ms.String(), "\n"), strings.Count(got, "\n"), "one line for each line")
}

func TestDecisionLatencyWrittenInBothUnits(t *testing.T) {
	Decision.Update(0.2)
	var b bytes.Buffer
	metrics.WritePrometheus(&b, false)
	out := b.String()
	require.Contains(t, out, `rate_limit_latency_ms_bucket{le="0.25"}`)
	require.Contains(t, out, `sentinel_limit_decision_duration_seconds_bucket{le="0.00025"}`)
	assert.Equal(t, 1, strings.Count(out, "rate_limit_latency_ms_count "), "the millisecond family once")
	assert.Equal(t, 1, strings.Count(out, "sentinel_limit_decision_duration_seconds_count "), "the seconds family once")
}
