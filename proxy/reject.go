package proxy

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// reason is one answer the gateway gives itself: its status, message,
// Retry-After, metric, and whether the connection ends with it. Every such
// answer but the rate limit's 429 (which carries the decision) is a row of
// the tables below and is written by reject; none allocates.
type reason struct {
	status     int
	msg        string
	retryAfter []byte // seconds; nil: none
	counter    *metrics.Counter
	close      bool   // close the connection after the answer
	allow      []byte // the Allow header of a 405
}

// Retry-After of the overload answers, in seconds: modes last at least a
// few seconds, a shed or a store outage is retried sooner.
var (
	overloadRetryAfter = []byte("5")
	shedRetryAfter     = []byte("1")
)

// The gateway's answers after routing. Requests refused before routing
// (framing, paths, identity headers) are in request.go.
var (
	reasonNoRoute = &reason{status: fasthttp.StatusNotFound, msg: "no route for this path",
		counter: rejectNoRoute}
	reasonPremiumOnly = &reason{status: fasthttp.StatusServiceUnavailable,
		msg:        "overload: degraded service, only PREMIUM traffic is served; retry later",
		retryAfter: overloadRetryAfter, counter: rejectModePremiumOnly}
	reasonFreeBlocked = &reason{status: fasthttp.StatusTooManyRequests,
		msg:        "overload: the FREE tier is paused while the backend is under pressure; retry later",
		retryAfter: overloadRetryAfter, counter: rejectModeFreeBlocked}
	reasonHeavyOff = &reason{status: fasthttp.StatusServiceUnavailable,
		msg:        "overload: this route is switched off while the backend is under pressure; retry later",
		retryAfter: overloadRetryAfter, counter: rejectModeHeavyOff}
	reasonStoreUnavailable = &reason{status: fasthttp.StatusServiceUnavailable,
		msg:        "rate limit store unavailable; retry later",
		retryAfter: shedRetryAfter, counter: rejectStoreUnavailable}
	reasonConcurrency = &reason{status: fasthttp.StatusServiceUnavailable,
		msg:        "overload: upstream at its concurrency limit; retry later",
		retryAfter: shedRetryAfter, counter: rejectConcurrency}

	// The client's faults: one answer, then the connection ends, since what
	// follows a broken body on the wire cannot be framed.
	reasonBodyTooLarge = &reason{status: fasthttp.StatusRequestEntityTooLarge,
		msg: "request body larger than server.max_request_body", counter: rejectBodyTooLarge, close: true}
	reasonBodyTimeout = &reason{status: fasthttp.StatusRequestTimeout,
		msg: "request body not received in time", counter: clientFaultTimeout, close: true}
	reasonBodyMalformed = &reason{status: fasthttp.StatusBadRequest,
		msg: "malformed or incomplete request body", counter: clientFaultMalformed, close: true}

	// Requests fasthttp could not read (handleError).
	reasonMalformed = &reason{status: fasthttp.StatusBadRequest, msg: "malformed request",
		counter: clientFaultMalformed, close: true}
	reasonHeadTimeout = &reason{status: fasthttp.StatusRequestTimeout, msg: "request not received in time",
		counter: clientFaultTimeout, close: true}

	// Failed forwards.
	reasonNoHealthy = &reason{status: fasthttp.StatusServiceUnavailable, msg: "no healthy upstream target",
		retryAfter: shedRetryAfter, counter: upstreamNoHealthy}
	reasonUpstreamTimeout = &reason{status: fasthttp.StatusGatewayTimeout, msg: "upstream timed out",
		counter: upstreamTimeouts}
	reasonUpstreamFailed = &reason{status: fasthttp.StatusBadGateway, msg: "upstream connection failed",
		counter: upstreamFailures}
)

// reject writes why's answer, in place of anything the response held.
func (s *Server) reject(ctx *fasthttp.RequestCtx, x *exchange, why *reason) {
	why.counter.Inc()
	x.outcome = why.msg
	h := &ctx.Response.Header
	if why.retryAfter != nil {
		h.SetBytesKV(hdrRetryAfter, why.retryAfter)
	}
	if why.allow != nil {
		h.SetBytesKV(hdrAllow, why.allow)
	}
	s.problem(ctx, x, why.status, why.msg)
	if why.close {
		ctx.SetConnectionClose()
	}
}
