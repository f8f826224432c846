package proxy

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/internal/reply"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/upstream"
)

var (
	hdrRetryAfter    = []byte("Retry-After")
	hdrSentinelCache = []byte("X-Sentinel-Cache")
	strHit           = []byte("HIT")
	strJSON          = []byte("application/json")
)

// handle is the request path: identify, route, gate, limit, forward.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	inflight.Add(1)
	if s.gate != nil {
		s.gate.RequestStarted()
	}
	id := s.idents.Get().(*Identity)
	id.outcome, id.upstreamLatency, id.answeredAt = "", 0, time.Time{}
	path, query, ref := s.prepare(ctx, id)
	var r *route
	if ref == nil {
		r = s.table.Load().match(ctx.Request.Header.Host(), path)
		s.setTarget(ctx, r, id, query)
	}
	s.identify(ctx, r, id)
	if ref == nil {
		ref = s.checkHeaders(ctx, id)
	}
	m := s.noRoute
	switch {
	case ref != nil:
		s.reject(ctx, id, ref)
	case r == nil:
		s.reject(ctx, id, reasonNoRoute)
	default:
		m = r.metrics
		s.serve(ctx, r, id)
	}
	if s.draining.Load() && !ctx.Hijacked() { // a 101 keeps its connection: it is spliced
		ctx.SetConnectionClose()
		drainAnswers.Inc()
	}
	// Answer with no Content-Type when the upstream sent none.
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.Response.Header.SetCanonical(s.requestIDHeader, id.RequestID)
	// The upstream's answer time ends a forwarded request: what follows is
	// header work (and a copy into the cache), and the body is written
	// after the handler returns anyway. Other requests read the clock.
	now := id.answeredAt
	if now.IsZero() {
		now = time.Now()
	}
	m.count(ctx.Response.StatusCode(), now.Sub(start).Seconds())
	if s.access != nil {
		s.access.write(ctx, id, start, now)
	}
	s.idents.Put(id)
	if s.gate != nil {
		s.gate.RequestFinished()
	}
	inflight.Add(-1)
}

// serve decides and forwards one routed request, in phases: admit (mode
// gates and limits), acquire (a concurrency slot), outbound (body cap,
// hop-by-hop and forwarded headers), forward, respond. A phase that refuses
// answers with a reason and ends the request.
func (s *Server) serve(ctx *fasthttp.RequestCtx, r *route, id *Identity) {
	var pol adaptive.Policy
	if s.gate != nil {
		pol = s.gate.Policy()
	}
	cacheable := s.cache != nil && r.CacheTTL > 0 && ctx.IsGet()
	if why := s.gates(ctx, r, id, pol, cacheable); why != nil {
		if why != servedFromCache {
			s.reject(ctx, id, why)
		} else {
			id.outcome = outcomeCached
		}
		return
	}
	d, why := s.admit(id)
	if why == nil && d.Allowed {
		id.outcome = outcomeAllowed
	}
	switch {
	case why != nil:
		s.reject(ctx, id, why)
		return
	case !d.Allowed:
		id.record(outcomeRateLimited, d.Scope)
		rejectRateLimit.Inc()
		s.tooMany(ctx, id, &d)
		return
	case r.WebSocket && isUpgrade(&ctx.Request.Header):
		s.upgrade(ctx, r, id, &d)
		return
	}
	// A declared body over the limit is refused before it takes a slot.
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > int64(s.cfg.Server.MaxRequestBody) {
		s.reject(ctx, id, reasonBodyTooLarge)
		return
	}
	pre, complete, err := s.receive(ctx, id)
	if err != nil {
		s.reject(ctx, id, clientFaultReason(err))
		return
	}
	ticket, why := s.acquire(r, id)
	if why != nil {
		s.reject(ctx, id, why)
		return
	}
	req, body := s.outbound(ctx, r, id, pre, complete)
	if req != &ctx.Request {
		defer fasthttp.ReleaseRequest(req)
	}
	class, err := s.forward(ctx, r, id, req, ticket, cacheable)
	s.respond(ctx, r, id, req, body, class, err, &d, cacheable)
}

// servedFromCache is the gates' word for a request answered from the cache.
var servedFromCache = &reason{}

// gates applies the mode's policy: the plan gate first (no cached answer is
// a way around it), then Critical mode's cached reads, then heavy routes.
func (s *Server) gates(ctx *fasthttp.RequestCtx, r *route, id *Identity, pol adaptive.Policy, cacheable bool) *reason {
	if why := planGate(id, pol); why != nil {
		return why
	}
	if cacheable && pol.CacheOnly && s.serveCached(ctx, id) {
		return servedFromCache // a cached read never touches the upstream
	}
	if pol.HeavyOff && r.Heavy {
		return reasonHeavyOff
	}
	return nil
}

// admit asks the limiter. The decision's headers go on the answer; a store
// that cannot decide (on_store_failure: closed) is a reason.
func (s *Server) admit(id *Identity) (limit.Decision, *reason) {
	if s.limiter == nil {
		return limit.Decision{Allowed: true}, nil
	}
	lr := &id.limitReq
	*lr = limit.Request{IP: id.IPText, Resource: id.Resource, Tokens: 1}
	if !id.Anonymous {
		lr.APIKey, lr.Tenant, lr.Plan = id.APIKey, id.Tenant, id.Plan
	}
	if id.RequestIDTrusted {
		lr.RequestID = id.RequestID
	}
	d := s.limiter.Allow(context.Background(), lr) // not ctx: fasthttp reuses RequestCtx
	*lr = limit.Request{}
	if d.Unavailable {
		return d, reasonStoreUnavailable
	}
	return d, nil
}

// acquire takes a slot of the route's upstream concurrency limit.
func (s *Server) acquire(r *route, id *Identity) (adaptive.Ticket, *reason) {
	c := r.conc
	if c == nil {
		return adaptive.Ticket{}, nil
	}
	t, ok := c.Acquire(adaptive.PriorityOf(id.Plan), r.concRoute)
	if !ok {
		return adaptive.Ticket{}, reasonConcurrency
	}
	return t, nil
}

// receive reads the head of a streamed request body, up to
// server.request_buffer, before the request takes a slot: a body that fits
// arrives whole (complete) and a slow or broken upload is answered here,
// without the upstream. The bytes live in id's buffer until the request
// ends.
func (s *Server) receive(ctx *fasthttp.RequestCtx, id *Identity) (pre []byte, complete bool, err error) {
	cl := ctx.Request.Header.ContentLength()
	if (cl <= 0 && cl != -1) || !ctx.Request.IsBodyStream() {
		return nil, true, nil
	}
	maxBody := int(s.cfg.Server.MaxRequestBody)
	want := min(int(s.cfg.Server.RequestBuffer), maxBody+1)
	if cl > 0 {
		want = min(want, cl)
	}
	buf := id.bodyBuf[:0]
	if cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	n, err := io.ReadFull(ctx.RequestBodyStream(), buf[:want])
	buf = buf[:n]
	id.bodyBuf = buf
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		if cl > 0 {
			return nil, false, err // shorter than its Content-Length
		}
		return buf, true, nil // a chunked body that fits
	case err != nil:
		return nil, false, err
	case n > maxBody:
		return nil, false, errBodyTooLarge
	}
	return buf, cl == n, nil
}

// outbound prepares the request to forward: the client's, or, when it has a
// body, a pooled copy (the caller releases it) whose body is the buffered
// head pre, followed, unless complete, by the rest of the stream read
// through clientBody. Replacing the server's own body stream would release
// it, hence the copy. clientBody tells the client's failures (malformed
// framing, too large, too slow, gone) from the upstream's.
func (s *Server) outbound(ctx *fasthttp.RequestCtx, r *route, id *Identity, pre []byte, complete bool) (*fasthttp.Request, *clientBody) {
	req := &ctx.Request
	var body *clientBody
	if pre != nil {
		fwd := fasthttp.AcquireRequest()
		req.Header.CopyTo(&fwd.Header)
		if complete {
			fwd.SetBodyRaw(pre)
		} else {
			body = &id.body
			*body = clientBody{pre: pre, r: ctx.RequestBodyStream(), left: int64(s.cfg.Server.MaxRequestBody) - int64(len(pre))}
			if t := r.bodyTimeout; t > 0 {
				body.deadline = time.Now().Add(t).UnixNano()
			}
			fwd.SetBodyStream(body, req.Header.ContentLength())
		}
		req = fwd
	}
	cleanRequest(&req.Header, id.headers, id.PeerTrusted)
	peer := id.Peer.AppendTo(id.peerBuf[:0])
	id.scratch = setForwarded(&req.Header, peer, id.PeerTrusted, ctx.IsTLS(), id.scratch[:0])
	req.Header.SetCanonical(s.requestIDHeader, id.RequestID)
	return req, body
}

// forward sends req to the route's pool, classifies the result once and
// feeds it, with the upstream's latency (not the time queued for a slot),
// to the concurrency limit and the adaptive signals.
func (s *Server) forward(ctx *fasthttp.RequestCtx, r *route, id *Identity, req *fasthttp.Request, ticket adaptive.Ticket, cacheable bool) (upstream.Class, error) {
	resp := &ctx.Response
	resp.StreamBody = true
	sent := time.Now()
	end, err := r.pool.DoAt(req, resp, sent)
	if err == nil && cacheable {
		err = s.bufferForCache(resp)
	}
	latency := end.Sub(sent)
	id.upstreamLatency, id.answeredAt = latency, end
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	class := upstream.Classify(err, status)
	res := adaptiveResult[class]
	ticket.Release(end, latency, res)
	if s.gate != nil {
		s.gate.ObserveUpstream(end, latency, res)
	}
	return class, err
}

// bufferForCache reads a streamed answer whole when the cache could keep it:
// a 200 whose Content-Length is within the cache's largest body. Any other
// answer stays streamed, and the cache skips streamed answers, so a large or
// endless answer (chunked, with no length) on a cacheable route is passed
// through, never held in memory. The read ends at the Content-Length and,
// like a streamed answer's, at the pool's deadline; an error is the
// upstream's (502).
func (s *Server) bufferForCache(resp *fasthttp.Response) error {
	n := resp.Header.ContentLength()
	stream := resp.BodyStream()
	if stream == nil || resp.StatusCode() != fasthttp.StatusOK || n < 0 || n > s.cache.MaxBody() {
		return nil
	}
	bb := bodyBuffers.Get()
	defer bodyBuffers.Put(bb)
	// Read to io.EOF, not just n bytes: only then does fasthttp put the
	// connection back in the pool when the stream is closed.
	if _, err := bb.ReadFrom(stream); err != nil {
		return err
	}
	resp.SetBody(bb.B) // closes the stream
	return nil
}

// bodyBuffers hold answers read whole for the cache.
var bodyBuffers bytebufferpool.Pool

// respond finishes the answer: the reason of a failed forward, or the
// upstream's answer with its hop-by-hop headers removed, the rate-limit
// headers added, and a copy in the cache when it may be shared.
func (s *Server) respond(ctx *fasthttp.RequestCtx, r *route, id *Identity, req *fasthttp.Request, body *clientBody,
	class upstream.Class, err error, d *limit.Decision, cacheable bool) {
	switch {
	case class == upstream.ClientFault:
		ctx.Response.Reset()
		s.reject(ctx, id, clientFaultReason(body.fault))
		return
	case err != nil:
		ctx.Response.Reset()
		s.reject(ctx, id, upstreamErrorReason(err))
		return
	case body != nil && body.fault != nil:
		// The upstream answered before the client's body broke: pass the
		// answer on, but the connection's framing is lost.
		ctx.SetConnectionClose()
	}
	resp := &ctx.Response
	stripHopResponse(&resp.Header)
	if d.Scope != limit.ScopeNone {
		reply.SetRateLimitHeaders(&resp.Header, d)
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

// clientFaultReason answers a request whose body the client broke: 413
// over max_request_body, 408 when it came too slowly, 400 otherwise.
func clientFaultReason(err error) *reason {
	switch {
	case errors.Is(err, errBodyTooLarge):
		return reasonBodyTooLarge
	case isTimeout(err):
		return reasonBodyTimeout
	}
	return reasonBodyMalformed
}

// clientBody passes a streamed request body through, until it grows past
// the limit or the client fails to deliver it; then it fails the upload
// with an *upstream.ClientBodyError, so that the pool counts nothing against
// the target, and keeps the cause in fault.
//
// A body still arriving when the pool's timeout has passed (deadline) is
// the client's fault too: a trickling upload must not read as an upstream
// timeout.
type clientBody struct {
	pre      []byte // read before the stream
	r        io.Reader
	left     int64
	deadline int64 // unix nanos; 0: none
	fault    error
}

var (
	errBodyTooLarge = errors.New("proxy: request body larger than server.max_request_body")
	errBodyTooSlow  = bodyTimeoutError{}
)

// bodyTimeoutError is a body that did not arrive within the pool's
// timeout; it is a timeout (net.Error), answered 408.
type bodyTimeoutError struct{}

func (bodyTimeoutError) Error() string {
	return "proxy: request body not received within the upstream timeout"
}
func (bodyTimeoutError) Timeout() bool   { return true }
func (bodyTimeoutError) Temporary() bool { return false }

func (b *clientBody) Read(p []byte) (int, error) {
	if b.fault != nil {
		return 0, &upstream.ClientBodyError{Err: b.fault}
	}
	if len(b.pre) > 0 {
		n := copy(p, b.pre)
		b.pre = b.pre[n:]
		return n, nil
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left < 0:
		b.fault = errBodyTooLarge
	case b.deadline != 0 && time.Now().UnixNano() > b.deadline:
		b.fault = errBodyTooSlow
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

// upstreamErrorReason answers a failed forward: 503 when no target is
// usable, 504 on a timeout, 502 otherwise.
func upstreamErrorReason(err error) *reason {
	switch {
	case errors.Is(err, upstream.ErrNoHealthy):
		return reasonNoHealthy
	case errors.Is(err, upstream.ErrTimeout):
		return reasonUpstreamTimeout
	}
	return reasonUpstreamFailed
}

// tooMany writes the 429 answer of a rate limit.
func (s *Server) tooMany(ctx *fasthttp.RequestCtx, id *Identity, d *limit.Decision) {
	h := &ctx.Response.Header
	reply.SetRateLimitHeaders(h, d)
	reply.SetRetryAfter(h, d)
	b := append(id.scratch[:0], `{"error":"rate limit exceeded","scope":"`...)
	b = append(b, d.Scope.String()...)
	b = append(b, `","limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, reply.RetryAfterMillis(d.RetryAfter), 10)
	b = append(b, `,"request_id":`...)
	b = reply.AppendJSONString(b, id.RequestID)
	b = append(b, "}\n"...)
	id.scratch = b
	ctx.Response.Header.SetContentTypeBytes(strJSON)
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.Response.SetBody(b)
}

// problem writes a JSON error answer {"error": msg, "request_id": id}.
func (s *Server) problem(ctx *fasthttp.RequestCtx, id *Identity, status int, msg string) {
	id.scratch = reply.Problem{Msg: msg, RequestID: id.RequestID}.Write(ctx, status, id.scratch)
}

// writeProblem is problem without an Identity (fasthttp's error handler).
func (s *Server) writeProblem(ctx *fasthttp.RequestCtx, status int, msg string, requestID []byte) {
	var buf [256]byte
	ctx.Response.Header.SetCanonical(s.requestIDHeader, requestID)
	reply.Problem{Msg: msg, RequestID: requestID}.Write(ctx, status, buf[:0])
}
