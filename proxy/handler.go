package proxy

import (
	"context"
	"errors"
	"io"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// planPremium is the plan that passes in Critical mode.
const planPremium = "PREMIUM"

// Retry-After of the overload answers, in seconds: modes last at least a
// few seconds.
const (
	overloadRetryAfter = "5"
	shedRetryAfter     = "1"
)

var (
	hdrRetryAfter    = []byte("Retry-After")
	hdrSentinelCache = []byte("X-Sentinel-Cache")
	strHit           = []byte("HIT")
	strJSON          = []byte("application/json")
)

// handle is the request path: identify, route, gate, limit, forward.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	start := s.now()
	inflight.Add(1)
	if s.gate != nil {
		s.gate.RequestStarted()
	}
	id := s.idents.Get().(*Identity)
	path, query, ref := s.prepare(ctx, id)
	var r *route
	if ref == nil {
		r = s.routes.match(ctx.Request.Header.Host(), path)
		s.setTarget(ctx, r, id, query)
	}
	s.identify(ctx, r, id)
	if ref == nil {
		ref = s.checkHeaders(ctx, id)
	}
	m := s.noRoute
	switch {
	case ref != nil:
		s.refuse(ctx, id, ref)
	case r == nil:
		rejectNoRoute.Inc()
		s.problem(ctx, id, fasthttp.StatusNotFound, "no route for this path")
	default:
		m = s.metrics[r.index]
		s.serve(ctx, r, id)
	}
	// Answer with no Content-Type when the upstream sent none.
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.Response.Header.SetBytesKV(s.requestIDHeader, id.RequestID)
	m.count(ctx.Response.StatusCode(), s.now().Sub(start).Seconds())
	s.idents.Put(id)
	if s.gate != nil {
		s.gate.RequestFinished()
	}
	inflight.Add(-1)
}

// serve decides and forwards one routed request.
func (s *Server) serve(ctx *fasthttp.RequestCtx, r *route, id *Identity) {
	var pol adaptive.Policy
	if s.gate != nil {
		pol = s.gate.Policy()
	}
	cacheable := s.cache != nil && r.CacheTTL > 0 && ctx.IsGet()
	if s.planGate(ctx, id, pol) {
		return
	}
	if cacheable && pol.CacheOnly && s.serveCached(ctx, id) {
		return // Critical mode: a cached read never touches the upstream
	}
	if pol.HeavyOff && r.Heavy {
		rejectModeHeavyOff.Inc()
		ctx.Response.Header.SetBytesKV(hdrRetryAfter, []byte(overloadRetryAfter))
		s.problem(ctx, id, fasthttp.StatusServiceUnavailable, "overload: this route is switched off while the backend is under pressure; retry later")
		return
	}

	var d limit.Decision
	if s.limiter != nil {
		lr := &id.limitReq
		*lr = limit.Request{IP: id.IPText, Resource: id.Resource, Tokens: 1}
		if !id.Anonymous {
			lr.APIKey, lr.Tenant, lr.Plan = id.APIKey, id.Tenant, id.Plan
		}
		if id.RequestIDTrusted {
			lr.RequestID = id.RequestID
		}
		d = s.limiter.Allow(context.Background(), lr) // not ctx: fasthttp reuses RequestCtx
		*lr = limit.Request{}
		switch {
		case d.Unavailable:
			rejectStoreUnavailable.Inc()
			ctx.Response.Header.SetBytesKV(hdrRetryAfter, []byte(shedRetryAfter))
			s.problem(ctx, id, fasthttp.StatusServiceUnavailable, "rate limit store unavailable; retry later")
			return
		case !d.Allowed:
			rejectRateLimit.Inc()
			s.tooMany(ctx, id, &d)
			return
		}
	}

	req := &ctx.Request
	// The server streams request bodies, so it does not enforce
	// max_request_body itself: a declared length over it is refused here, a
	// streamed body is cut off (and refused) when it grows past it.
	maxBody := int64(s.cfg.Server.MaxRequestBody)
	cl := req.Header.ContentLength()
	if cl > 0 && int64(cl) > maxBody {
		s.clientFault(ctx, id, errBodyTooLarge)
		return
	}

	var ticket adaptive.Ticket
	if c := s.conc[r.index]; c != nil {
		t, ok := c.Acquire(adaptive.PriorityOf(id.Plan))
		if !ok {
			rejectConcurrency.Inc()
			ctx.Response.Header.SetBytesKV(hdrRetryAfter, []byte(shedRetryAfter))
			s.problem(ctx, id, fasthttp.StatusServiceUnavailable, "overload: upstream at its concurrency limit; retry later")
			return
		}
		ticket = t
	}

	var body *clientBody
	if (cl > 0 || cl == -1) && req.IsBodyStream() {
		// Every streamed body is read through clientBody, which tells the
		// client's failures (malformed framing, too large, too slow, gone)
		// from the upstream's. Replacing the server's body stream would
		// release it: forward a copy of the request instead.
		body = &id.body
		*body = clientBody{r: ctx.RequestBodyStream(), left: maxBody}
		fwd := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(fwd)
		req.Header.CopyTo(&fwd.Header)
		fwd.SetBodyStream(body, cl)
		req = fwd
	}
	stripHopRequest(&req.Header)
	if !id.PeerTrusted {
		stripForwarded(&req.Header)
	}
	peer := id.Peer.AppendTo(id.peerBuf[:0])
	id.scratch = setForwarded(&req.Header, peer, id.PeerTrusted, ctx.IsTLS(), id.scratch[:0])
	req.Header.SetBytesKV(s.requestIDHeader, id.RequestID)

	resp := &ctx.Response
	resp.StreamBody = !cacheable // stream answers unless they may be cached
	sent := s.now()
	err := s.pools[r.index].Do(req, resp)
	latency := s.now().Sub(sent)
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	class := upstream.Classify(err, status)
	res := adaptiveResult[class]
	ticket.Release(latency, res)
	if s.gate != nil {
		s.gate.ObserveUpstream(latency, res)
	}
	switch {
	case class == upstream.ClientFault:
		s.clientFault(ctx, id, body.fault)
		return
	case err != nil:
		s.upstreamError(ctx, id, err)
		return
	case body != nil && body.fault != nil:
		// The upstream answered before the client's body broke: pass the
		// answer on, but the connection's framing is lost.
		ctx.SetConnectionClose()
	}
	stripHopResponse(&resp.Header)
	if d.Scope != limit.ScopeNone {
		setRateLimitHeaders(&resp.Header, &d)
	}
	if cacheable && resp.StatusCode() == fasthttp.StatusOK && s.sharable(&req.Header, &resp.Header) {
		s.cache.Set(s.cacheKey(ctx, id), resp, r.CacheTTL)
	}
}

// adaptiveResult is what each class of answer tells the adaptive layer:
// only the upstream's own answers are results; the client's faults and the
// gateway's answers are Ignored.
var adaptiveResult = [...]adaptive.Result{
	upstream.Success:      adaptive.OK,
	upstream.ClientFault:  adaptive.Ignored,
	upstream.Gateway:      adaptive.Ignored,
	upstream.Backpressure: adaptive.Backpressure,
	upstream.Failure:      adaptive.Failed,
}

// clientFault answers a request whose body the client broke: 413 over
// max_request_body, 408 when it came too slowly, 400 otherwise. It is one
// answer, and the last on the connection: what follows the broken body on
// the wire cannot be framed.
func (s *Server) clientFault(ctx *fasthttp.RequestCtx, id *Identity, err error) {
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	switch {
	case errors.Is(err, errBodyTooLarge):
		s.bodyTooLarge(ctx, id)
	case isTimeout(err):
		clientFaultTimeout.Inc()
		s.problem(ctx, id, fasthttp.StatusRequestTimeout, "request body not received in time")
	default:
		clientFaultMalformed.Inc()
		s.problem(ctx, id, fasthttp.StatusBadRequest, "malformed or incomplete request body")
	}
}

// bodyTooLarge answers 413.
func (s *Server) bodyTooLarge(ctx *fasthttp.RequestCtx, id *Identity) {
	rejectBodyTooLarge.Inc()
	s.problem(ctx, id, fasthttp.StatusRequestEntityTooLarge, "request body larger than server.max_request_body")
}

// clientBody passes a streamed request body through, until it grows past
// the limit or the client fails to deliver it; then it fails the upload
// with an *upstream.ClientBodyError, so that the pool counts nothing against
// the target, and keeps the cause in fault.
type clientBody struct {
	r     io.Reader
	left  int64
	fault error
}

var errBodyTooLarge = errors.New("proxy: request body larger than server.max_request_body")

func (b *clientBody) Read(p []byte) (int, error) {
	if b.fault != nil {
		return 0, &upstream.ClientBodyError{Err: b.fault}
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left < 0:
		b.fault = errBodyTooLarge
	case err != nil && err != io.EOF:
		b.fault = err
	default:
		return n, err
	}
	return 0, &upstream.ClientBodyError{Err: b.fault}
}

// serveCached answers from the response cache; false on a miss.
func (s *Server) serveCached(ctx *fasthttp.RequestCtx, id *Identity) bool {
	if !s.cache.Get(s.cacheKey(ctx, id), &ctx.Response) {
		return false
	}
	ctx.Response.Header.SetBytesKV(hdrSentinelCache, strHit)
	return true
}

// upstreamError answers a failed forward: 503 when no target is usable, 504
// on a timeout, 502 otherwise.
func (s *Server) upstreamError(ctx *fasthttp.RequestCtx, id *Identity, err error) {
	ctx.Response.Reset()
	switch {
	case errors.Is(err, upstream.ErrNoHealthy):
		upstreamNoHealthy.Inc()
		ctx.Response.Header.SetBytesKV(hdrRetryAfter, []byte(shedRetryAfter))
		s.problem(ctx, id, fasthttp.StatusServiceUnavailable, "no healthy upstream target")
	case errors.Is(err, upstream.ErrTimeout):
		upstreamTimeouts.Inc()
		s.problem(ctx, id, fasthttp.StatusGatewayTimeout, "upstream timed out")
	default:
		upstreamFailures.Inc()
		s.problem(ctx, id, fasthttp.StatusBadGateway, "upstream connection failed")
	}
}

// tooMany writes the 429 answer of a rate limit.
func (s *Server) tooMany(ctx *fasthttp.RequestCtx, id *Identity, d *limit.Decision) {
	h := &ctx.Response.Header
	setRateLimitHeaders(h, d)
	if d.RetryAfter >= 0 {
		var buf [20]byte
		h.SetBytesKV(hdrRetryAfter, strconv.AppendInt(buf[:0], max(1, ceilSeconds(d.RetryAfter)), 10))
	}
	b := append(id.scratch[:0], `{"error":"rate limit exceeded","scope":"`...)
	b = append(b, d.Scope.String()...)
	b = append(b, `","limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, retryAfterMS(d.RetryAfter), 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, id.RequestID)
	b = append(b, "}\n"...)
	id.scratch = b
	ctx.Response.Header.SetContentTypeBytes(strJSON)
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.Response.SetBody(b)
}

// problem writes a JSON error answer {"error": msg, "request_id": id}.
func (s *Server) problem(ctx *fasthttp.RequestCtx, id *Identity, status int, msg string) {
	id.scratch = s.writeProblemBuf(ctx, status, msg, id.RequestID, id.scratch[:0])
}

// writeProblem is problem without an Identity (fasthttp's error handler).
func (s *Server) writeProblem(ctx *fasthttp.RequestCtx, status int, msg string, requestID []byte) {
	var buf [256]byte
	ctx.Response.Header.SetBytesKV(s.requestIDHeader, requestID)
	s.writeProblemBuf(ctx, status, msg, requestID, buf[:0])
}

func (s *Server) writeProblemBuf(ctx *fasthttp.RequestCtx, status int, msg string, requestID, b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, requestID)
	b = append(b, "}\n"...)
	ctx.Response.Header.SetContentTypeBytes(strJSON)
	ctx.SetStatusCode(status)
	ctx.Response.SetBody(b)
	return b
}

// appendJSONString appends s as a JSON string. Request IDs and messages are
// printable ASCII; quotes and backslashes are escaped, anything else below
// 0x20 becomes a space.
func appendJSONString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
