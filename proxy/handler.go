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
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/proxy/hop"
	"github.com/sentinel-gateway/sentinel/proxy/upload"
	"github.com/sentinel-gateway/sentinel/reply"
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
	// fasthttp reads the clock just before it calls the handler: the
	// request's start is that reading, not one more (a RequestCtx served
	// outside a fasthttp server has none).
	start := ctx.Time()
	if start.IsZero() {
		start = time.Now()
	}
	inflight.add(ctx.ConnID(), 1)
	if s.gate != nil {
		s.gate.RequestStarted(ctx.ConnID())
	}
	x := s.acquireExchange()
	x.start = start
	m := s.noRoute
	if why := s.inspect(ctx, x); why != nil {
		s.reject(ctx, x, why)
	} else {
		m = x.route.metrics
		s.serve(ctx, x)
		if x.decision.NReserved > 0 && s.settler != nil {
			s.settle(ctx, x)
		}
	}
	if s.draining.Load() && !ctx.Hijacked() { // a 101 keeps its connection: it is spliced
		ctx.SetConnectionClose()
		drainAnswers.Inc()
	}
	// Answer with no Content-Type when the upstream sent none.
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.Response.Header.SetCanonical(s.requestIDHeader, x.requestID)
	// The upstream's answer time ends a forwarded request, and the
	// decision's time a refused one: what follows is header work (and a
	// copy into the cache), and the body is written after the handler
	// returns anyway. Other requests read the clock.
	now := x.answeredAt
	if now.IsZero() && x.outcome == outcomeRateLimited {
		now = x.decision.Decided
	}
	if now.IsZero() {
		now = time.Now()
	}
	m.count(ctx.Response.StatusCode(), now.Sub(start).Seconds())
	if s.access != nil {
		s.access.write(ctx, x, start, now)
	}
	s.releaseExchange(x)
	if s.gate != nil {
		s.gate.RequestFinished(ctx.ConnID())
	}
	inflight.add(ctx.ConnID(), -1)
}

// serve decides and forwards one routed request, in phases: admit (mode
// gates and limits), acquire (a concurrency slot), outbound (body cap,
// hop-by-hop and forwarded headers), forward, respond. A phase that refuses
// answers with a reason and ends the request.
func (s *Server) serve(ctx *fasthttp.RequestCtx, x *exchange) {
	r := x.route
	var pol adaptive.Policy
	if s.gate != nil {
		pol = s.gate.Policy()
	}
	x.cacheable = s.cache != nil && r.CacheTTL > 0 && ctx.IsGet()
	if why := s.gates(ctx, x, pol); why != nil {
		if why != servedFromCache {
			s.reject(ctx, x, why)
		} else {
			x.outcome = outcomeCached
		}
		return
	}
	var body received
	// A cost limit that estimates from the JSON body reads it first.
	if s.settler != nil && s.settler.ReadsBody(x.resource()) && !s.receiveBody(ctx, x, &body) {
		return
	}
	if !s.decide(ctx, x, &body) {
		return
	}
	if r.WebSocket && isUpgrade(&ctx.Request.Header) {
		s.upgrade(ctx, x)
		return
	}
	if !body.done && !s.receiveBody(ctx, x, &body) {
		return
	}
	pre, complete := body.pre, body.complete
	ticket, why := s.acquire(x)
	if why != nil {
		s.reject(ctx, x, why)
		return
	}
	req := s.outbound(ctx, x, pre, complete)
	if req != &ctx.Request {
		defer fasthttp.ReleaseRequest(req)
	}
	// The decision's clock reading dates the forward when nothing was
	// waited for since (a body read from the client, a slot queued for):
	// taking a free slot and preparing the request take about a microsecond.
	sent := x.decision.Decided
	if pre != nil || ticket.Waited() || sent.IsZero() {
		sent = time.Now()
	}
	err := s.forward(ctx, x, req, ticket, sent)
	s.respond(ctx, x, req, err)
}

// received is the head of a request's body as receiveBody read it.
type received struct {
	pre      []byte
	complete bool // pre is the whole body
	done     bool // read (or there is none to read)
}

// receiveBody reads the head of the request's body into b (see receive),
// after refusing a declared body over the limit before it takes a slot.
// It answers a body that cannot be read and reports false.
func (s *Server) receiveBody(ctx *fasthttp.RequestCtx, x *exchange, b *received) bool {
	if cl := ctx.Request.Header.ContentLength(); cl > 0 && int64(cl) > int64(s.cfg.Server.MaxRequestBody) {
		s.reject(ctx, x, reasonBodyTooLarge)
		return false
	}
	pre, complete, err := s.receive(ctx, x)
	if err != nil {
		s.reject(ctx, x, clientFaultReason(err))
		return false
	}
	b.pre, b.complete, b.done = pre, complete, true
	return true
}

// decide asks the limiter (admit) and answers a refusal; it reports
// whether the request passed. body is the request's body when read.
func (s *Server) decide(ctx *fasthttp.RequestCtx, x *exchange, body *received) bool {
	why := s.admit(ctx, x, body)
	switch {
	case why != nil:
		s.reject(ctx, x, why)
		return false
	case !x.decision.Allowed && !s.wait(ctx, x):
		x.outcome = outcomeRateLimited
		rejectRateLimit.Inc()
		s.tooMany(ctx, x)
		return false
	}
	x.outcome = outcomeAllowed
	return true
}

// wait holds a request that a limit refused but lets wait (max_wait)
// until the limiter admits it, at most max_wait and the client's own
// deadline (identity.deadline_header, in milliseconds); it reports whether
// it was admitted. Meanwhile the request is not counted in flight by the
// adaptive layer: it is no load on the backend.
func (s *Server) wait(ctx *fasthttp.RequestCtx, x *exchange) bool {
	d := &x.decision
	if d.MaxWait <= 0 || s.settler == nil {
		return false
	}
	until := x.start.Add(d.MaxWait)
	if ms, err := strconv.ParseUint(string(ctx.Request.Header.PeekBytes(s.deadlineHeader)), 10, 32); err == nil {
		until = minTime(until, x.start.Add(time.Duration(ms)*time.Millisecond))
	}
	if s.gate != nil {
		s.gate.RequestWaiting(ctx.ConnID())
		defer s.gate.RequestResumed(ctx.ConnID())
	}
	return s.settler.Wait(context.Background(), &x.limitReq, d, until)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// servedFromCache is the gates' word for a request answered from the cache.
var servedFromCache = &reason{}

// gates applies the mode's policy: the plan gate first (no cached answer is
// a way around it), then Critical mode's cached reads, then heavy routes.
func (s *Server) gates(ctx *fasthttp.RequestCtx, x *exchange, pol adaptive.Policy) *reason {
	if why := planGate(x, pol); why != nil {
		return why
	}
	if x.cacheable && pol.CacheOnly && s.serveCached(ctx, x) {
		return servedFromCache // a cached read never touches the upstream
	}
	if pol.HeavyOff && x.route.Heavy {
		return reasonHeavyOff
	}
	return nil
}

// admit asks the limiter and writes its decision in x. The decision's
// headers go on the answer; a store that cannot decide (on_store_failure:
// closed) is a reason.
func (s *Server) admit(ctx *fasthttp.RequestCtx, x *exchange, body *received) *reason {
	if s.limiter == nil {
		x.decision = limit.Decision{Allowed: true}
		return nil
	}
	lr := &x.limitReq
	x.attrs.r = &ctx.Request
	*lr = limit.Request{IP: x.ipText, Resource: x.resource(), Tokens: 1,
		Method: ctx.Method(), Host: ctx.Host(), Path: ctx.Path(), Attrs: &x.attrs, Arrived: x.start}
	if !x.anonymous {
		lr.APIKey, lr.Tenant, lr.Plan = x.apiKey, x.tenant, x.plan
	}
	if x.requestIDTrusted {
		lr.RequestID = x.requestID
	}
	lr.BodyLen = int64(ctx.Request.Header.ContentLength())
	if body.complete {
		lr.Body, lr.BodyLen = body.pre, int64(len(body.pre))
	}
	s.limiter.Decide(context.Background(), lr, &x.decision) // not ctx: fasthttp reuses RequestCtx
	if x.decision.Unavailable {
		return reasonStoreUnavailable
	}
	return nil
}

// acquire takes a slot of the route's upstream concurrency limit.
func (s *Server) acquire(x *exchange) (adaptive.Ticket, *reason) {
	r := x.route
	c := r.conc
	if c == nil {
		return adaptive.Ticket{}, nil
	}
	t, ok := c.Acquire(adaptive.PriorityOf(x.plan), r.concRoute)
	if !ok {
		return adaptive.Ticket{}, reasonConcurrency
	}
	return t, nil
}

// receive reads the head of a streamed request body, up to
// server.request_buffer, before the request takes a slot: a body that fits
// arrives whole (complete) and a slow or broken upload is answered here,
// without the upstream. The bytes live in x's buffer until the request
// ends.
func (s *Server) receive(ctx *fasthttp.RequestCtx, x *exchange) (pre []byte, complete bool, err error) {
	cl := ctx.Request.Header.ContentLength()
	if (cl <= 0 && cl != -1) || !ctx.Request.IsBodyStream() {
		return nil, true, nil
	}
	maxBody := int(s.cfg.Server.MaxRequestBody)
	want := min(int(s.cfg.Server.RequestBuffer), maxBody+1)
	if cl > 0 {
		want = min(want, cl)
	}
	buf := x.bodyBuf[:0]
	if cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	n, err := io.ReadFull(ctx.RequestBodyStream(), buf[:want])
	buf = buf[:n]
	x.bodyBuf = buf
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		if cl > 0 {
			return nil, false, err // shorter than its Content-Length
		}
		return buf, true, nil // a chunked body that fits
	case err != nil:
		return nil, false, err
	case n > maxBody:
		return nil, false, upload.ErrTooLarge
	}
	return buf, cl == n, nil
}

// outbound prepares the request to forward: the client's, or, when it has a
// body, a pooled copy (the caller releases it) whose body is the buffered
// head pre, followed, unless complete, by the rest of the stream read
// through x's upload.Reader. Replacing the server's own body stream would
// release it, hence the copy. The Reader tells the client's failures
// (malformed framing, too large, too slow, gone) from the upstream's.
func (s *Server) outbound(ctx *fasthttp.RequestCtx, x *exchange, pre []byte, complete bool) *fasthttp.Request {
	req := &ctx.Request
	if pre != nil {
		fwd := fasthttp.AcquireRequest()
		req.Header.CopyTo(&fwd.Header)
		if complete {
			fwd.SetBodyRaw(pre)
		} else {
			x.body.Reset(pre, ctx.RequestBodyStream(), int64(s.cfg.Server.MaxRequestBody), x.route.bodyTimeout)
			fwd.SetBodyStream(&x.body, req.Header.ContentLength())
		}
		req = fwd
	}
	hop.Clean(&req.Header, x.headers, x.peerTrusted)
	peer := x.peer.AppendTo(x.peerBuf[:0])
	x.scratch = hop.SetForwarded(&req.Header, peer, x.peerTrusted, ctx.IsTLS(), x.scratch[:0])
	req.Header.SetCanonical(s.requestIDHeader, x.requestID)
	return req
}

// forward sends req, ready at sent, to the route's pool, classifies the
// result once (in x.class) and feeds it, with the upstream's latency (from
// sent: not the time queued for a slot), to the concurrency limit and the
// adaptive signals.
func (s *Server) forward(ctx *fasthttp.RequestCtx, x *exchange, req *fasthttp.Request, ticket adaptive.Ticket, sent time.Time) error {
	resp := &ctx.Response
	// May stream: the pool reads an answer of up to upstream.WholeAnswerMax
	// (by its Content-Length) whole and streams only larger or unknown-length
	// ones, which the server reads while it writes them to the client.
	resp.StreamBody = true
	stop := s.abortIfGone(ctx, x, req)
	end, err := x.route.pool.DoAt(req, resp, sent)
	stop()
	if err == nil && x.cacheable {
		err = s.bufferForCache(resp)
	}
	latency := end.Sub(sent)
	x.upstreamLatency, x.answeredAt = latency, end
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	x.class = upstream.Classify(err, status)
	res := adaptiveResult[x.class]
	ticket.Release(end, latency, res)
	if s.gate != nil {
		s.gate.ObserveUpstream(ctx.ConnID(), end, latency, res)
	}
	return err
}

// abortIfGone watches the client of a request that holds a concurrency
// slot while its forward waits for the answer's head, and aborts the
// forward if the client goes (see clientWatch); it returns what ends the
// watch. Other requests pay nothing.
func (s *Server) abortIfGone(ctx *fasthttp.RequestCtx, x *exchange, req *fasthttp.Request) (stop func()) {
	if !x.holdsSlot() {
		return noStop
	}
	a := &upstream.Aborter{}
	upstream.Watch(req, a)
	w := watchClient(ctx.Conn(), a.Abort)
	return func() {
		w.stop()
		upstream.Unwatch(req)
	}
}

func noStop() {}

// holdsSlot tells whether x's request holds a concurrency limit's slot.
func (x *exchange) holdsSlot() bool {
	d := &x.decision
	for i := range d.Reserved[:d.NReserved] {
		if d.Reserved[i].Meter.HoldsToTheEnd() {
			return true
		}
	}
	return false
}

// bufferForCache reads a streamed answer whole when the cache could keep it:
// a 200 whose Content-Length is within the cache's largest body (one of up
// to upstream.WholeAnswerMax arrives whole already). Any other
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

// respond finishes the answer to the forward of req, which failed with
// err (nil: the upstream answered): the reason of a failed forward, or the
// upstream's answer with its hop-by-hop headers removed, the rate-limit
// headers added, and a copy in the cache when it may be shared.
func (s *Server) respond(ctx *fasthttp.RequestCtx, x *exchange, req *fasthttp.Request, err error) {
	switch {
	case x.class == upstream.ClientFault:
		ctx.Response.Reset()
		s.reject(ctx, x, clientFaultReason(x.body.Fault()))
		return
	case err != nil:
		ctx.Response.Reset()
		s.reject(ctx, x, upstreamErrorReason(err))
		return
	case x.body.Fault() != nil:
		// The upstream answered before the client's body broke: pass the
		// answer on, but the connection's framing is lost.
		ctx.SetConnectionClose()
	}
	resp := &ctx.Response
	hop.StripResponse(&resp.Header)
	if x.decision.Scope != limit.ScopeNone {
		s.limitHeaders.Set(&resp.Header, &x.decision)
	}
	if x.cacheable && resp.StatusCode() == fasthttp.StatusOK && s.sharable(&req.Header, &resp.Header) {
		s.cache.Set(s.cacheKey(ctx, x), resp, x.route.CacheTTL)
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
	case errors.Is(err, upload.ErrTooLarge):
		return reasonBodyTooLarge
	case isTimeout(err):
		return reasonBodyTimeout
	}
	return reasonBodyMalformed
}

// serveCached answers from the response cache; false on a miss.
func (s *Server) serveCached(ctx *fasthttp.RequestCtx, x *exchange) bool {
	if !s.cache.Get(s.cacheKey(ctx, x), &ctx.Response) {
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

// tooMany writes the 429 answer of a rate limit: what refused (its scope,
// the policy's or the limit's name, its window as configured) and when to
// retry.
func (s *Server) tooMany(ctx *fasthttp.RequestCtx, x *exchange) {
	d := &x.decision
	h := &ctx.Response.Header
	s.limitHeaders.Set(h, d)
	reply.SetRetryAfter(h, d)
	b := append(x.scratch[:0], `{"error":"rate limit exceeded",`...)
	b = reply.AppendRefusal(b, d)
	b = append(b, `,"request_id":`...)
	b = reply.AppendJSONString(b, x.requestID)
	b = append(b, "}\n"...)
	x.scratch = b
	ctx.Response.Header.SetContentTypeBytes(strJSON)
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.Response.SetBody(b)
}

// problem writes a JSON error answer {"error": msg, "request_id": x.requestID}.
func (s *Server) problem(ctx *fasthttp.RequestCtx, x *exchange, status int, msg string) {
	x.scratch = reply.Problem{Msg: msg, RequestID: x.requestID}.Write(ctx, status, x.scratch)
}

// writeProblem is problem without an exchange (fasthttp's error handler).
func (s *Server) writeProblem(ctx *fasthttp.RequestCtx, status int, msg string, requestID []byte) {
	var buf [256]byte
	ctx.Response.Header.SetCanonical(s.requestIDHeader, requestID)
	reply.Problem{Msg: msg, RequestID: requestID}.Write(ctx, status, buf[:0])
}
