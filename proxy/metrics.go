package proxy

import (
	"strconv"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// Process-wide metrics (labels from fixed sets).
// drainAnswers counts the answers sent with Connection: close because
// the server drains.
var drainAnswers = metrics.NewCounter(`sentinel_proxy_drain_answers_total`)

// inflight counts the requests in the handler, in shards by connection:
// one word that every request writes twice would move between the cores
// on every request; the gauge adds the shards up.
var (
	inflight connCount
	_        = metrics.NewGauge(`sentinel_http_inflight`, func() float64 { return float64(inflight.load()) })
)

const countShards = 16

// connCount is a count sharded by connection ID, each shard on its own
// cache line.
type connCount struct {
	shards [countShards]struct {
		n atomic.Int64
		_ [56]byte
	}
}

func (c *connCount) add(conn uint64, d int64) { c.shards[conn%countShards].n.Add(d) }

func (c *connCount) load() int64 {
	var n int64
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return n
}

// Rejections, by sentinel_proxy_rejections_total{reason}.
var (
	rejectRateLimit        = rejection("rate_limit")
	rejectModeFreeBlocked  = rejection("mode_free_blocked")
	rejectModeHeavyOff     = rejection("mode_heavy_off")
	rejectModePremiumOnly  = rejection("mode_premium_only")
	rejectConcurrency      = rejection("concurrency")
	rejectStoreUnavailable = rejection("store_unavailable")
	rejectNoRoute          = rejection("no_route")
	rejectBodyTooLarge     = rejection("body_too_large")
	rejectBadPath          = rejection("bad_path")
	rejectBadHeader        = rejection("bad_header")
	rejectFraming          = rejection("framing")

	// underscoreDropped counts request headers dropped for an underscore in
	// their name (server.headers_with_underscores: drop).
	underscoreDropped = metrics.NewCounter(`sentinel_proxy_headers_dropped_total{reason="underscore"}`)
)

func rejection(reason string) *metrics.Counter {
	return metrics.NewCounter(`sentinel_proxy_rejections_total{reason="` + reason + `"}`)
}

// trackedCodes are the status codes counted under their own label; any other
// code is counted as its class ("2xx" ... "5xx"), so the label set is bounded.
var trackedCodes = [...]int{200, 201, 204, 206, 301, 302, 304, 400, 401, 403, 404, 405, 408, 413, 414, 429, 431, 500, 502, 503, 504, 505}

// routeMetrics are one route's counters, in the Server's metrics.Set (one
// set per Server, unregistered at Shutdown). Routes of one resource share
// them, in one table and across tables: a reload keeps counting them.
type routeMetrics struct {
	codes    [len(trackedCodes)]*metrics.Counter
	classes  [6]*metrics.Counter // index code/100; 0 for nonsense codes
	duration *metrics.PrometheusHistogram
	names    []string // the series, for unregistering a removed route's
}

func newRouteMetrics(set *metrics.Set, route string) *routeMetrics {
	m := &routeMetrics{}
	counter := func(code string) *metrics.Counter {
		name := `sentinel_http_requests_total{route="` + route + `",code="` + code + `"}`
		m.names = append(m.names, name)
		return set.GetOrCreateCounter(name)
	}
	for i, c := range trackedCodes {
		m.codes[i] = counter(strconv.Itoa(c))
	}
	m.classes[0] = counter("other")
	for c := 1; c <= 5; c++ {
		m.classes[c] = counter(strconv.Itoa(c) + "xx")
	}
	duration := `sentinel_http_request_duration_seconds{route="` + route + `"}`
	m.names = append(m.names, duration)
	m.duration = set.GetOrCreatePrometheusHistogram(duration)
	return m
}

func (m *routeMetrics) count(code int, seconds float64) {
	m.counter(code).Inc()
	m.duration.Update(seconds)
}

func (m *routeMetrics) counter(code int) *metrics.Counter {
	for i, c := range trackedCodes {
		if c == code {
			return m.codes[i]
		}
	}
	if c := code / 100; c >= 1 && c <= 5 {
		return m.classes[c]
	}
	return m.classes[0]
}

// Upstream failures as the proxy answers them.
var (
	upstreamNoHealthy = metrics.NewCounter(`sentinel_proxy_upstream_errors_total{kind="no_healthy"}`)
	upstreamTimeouts  = metrics.NewCounter(`sentinel_proxy_upstream_errors_total{kind="timeout"}`)
	upstreamFailures  = metrics.NewCounter(`sentinel_proxy_upstream_errors_total{kind="connect"}`)
)

// Requests the client broke (malformed framing, too slow, gone), answered
// without counting against the upstream:
// sentinel_proxy_client_faults_total{kind}. Bodies over max_request_body are
// counted as rejections (body_too_large).
var (
	clientFaultMalformed = metrics.NewCounter(`sentinel_proxy_client_faults_total{kind="malformed"}`)
	clientFaultTimeout   = metrics.NewCounter(`sentinel_proxy_client_faults_total{kind="timeout"}`)
)
