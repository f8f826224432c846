// Package latency holds the histogram of the limiter's decision times,
// rate_limit_latency_ms, and exposes it together with its twin in seconds,
// sentinel_limit_decision_duration_seconds.
package latency

import (
	"bytes"
	"io"
	"strconv"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// decisionSeconds is the base-unit twin of rate_limit_latency_ms, for
// Prometheus users who expect seconds.
const decisionSeconds = "sentinel_limit_decision_duration_seconds"

// latencySet holds rate_limit_latency_ms alone and is not registered: the
// writer below exposes it together with its seconds twin, both from one read
// of the counts, so a decision is observed once (the request path pays for
// one histogram) and the two families never disagree within a scrape.
var latencySet = metrics.NewSet()

// bucketsMS are the upper bounds of rate_limit_latency_ms: a local
// decision takes well under 0.01 ms, a store call about 0.1 to 1 ms.
var bucketsMS = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100}

// Decision is rate_limit_latency_ms: the duration of one decision, in
// milliseconds.
var Decision = latencySet.NewPrometheusHistogramExt(`rate_limit_latency_ms`, bucketsMS)

func init() {
	metrics.RegisterMetricsWriter(writeDecisionLatency)
}

var latencyBuf = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeDecisionLatency writes rate_limit_latency_ms as it is, then the same
// histogram in seconds.
func writeDecisionLatency(w io.Writer) {
	bb := latencyBuf.Get().(*bytes.Buffer)
	defer latencyBuf.Put(bb)
	bb.Reset()
	latencySet.WritePrometheus(bb)
	ms := bb.Bytes()
	_, _ = w.Write(ms)
	_, _ = w.Write(msToSeconds(ms))
}

var (
	msName = []byte("rate_limit_latency_ms")
	leOpen = []byte(`le="`)
)

// msToSeconds rewrites the exposition of rate_limit_latency_ms (metadata,
// buckets, sum and count) as decisionSeconds: bucket bounds and the sum are
// divided by 1000, counts are kept.
func msToSeconds(ms []byte) []byte {
	var out []byte
	for len(ms) > 0 {
		line := ms
		if i := bytes.IndexByte(ms, '\n'); i >= 0 {
			line, ms = ms[:i], ms[i+1:]
		} else {
			ms = nil
		}
		out = appendSecondsLine(out, line)
		out = append(out, '\n')
	}
	return out
}

func appendSecondsLine(out, line []byte) []byte {
	i := bytes.Index(line, msName)
	if i < 0 {
		return append(out, line...)
	}
	out = append(out, line[:i]...)
	out = append(out, decisionSeconds...)
	rest := line[i+len(msName):]
	if bytes.HasPrefix(rest, []byte("_sum ")) {
		out = append(out, "_sum "...)
		v, err := strconv.ParseFloat(string(rest[len("_sum "):]), 64)
		if err != nil {
			return append(out, rest[len("_sum "):]...)
		}
		return strconv.AppendFloat(out, v/1e3, 'g', -1, 64)
	}
	j := bytes.Index(rest, leOpen)
	if j < 0 {
		return append(out, rest...)
	}
	j += len(leOpen)
	k := bytes.IndexByte(rest[j:], '"')
	if k < 0 {
		return append(out, rest...)
	}
	out = append(out, rest[:j]...)
	out = appendSecondsBound(out, string(rest[j:j+k]))
	return append(out, rest[j+k:]...)
}

// appendSecondsBound appends the bound in milliseconds le as seconds, parsed
// as "<le>e-3" so that 0.005 becomes exactly 5e-06 and not the nearest
// quotient of a division.
func appendSecondsBound(out []byte, le string) []byte {
	v, err := strconv.ParseFloat(le+"e-3", 64)
	if err != nil { // +Inf
		return append(out, le...)
	}
	return strconv.AppendFloat(out, v, 'g', -1, 64)
}
