package admin

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/reply"
)

// check serves POST /v1/ratelimit/check: one decision from the proxy's
// limiter. A decision (allowed or not) answers 200 with the rate-limit
// headers; a refusal by on_store_failure: closed answers 503. Invalid requests
// answer 400 and never reach the limiter, so they are not counted.
func (s *Server) check(ctx *fasthttp.RequestCtx) {
	sc := checkScratches.Get().(*checkScratch)
	defer checkScratches.Put(sc)
	req, fe := parseCheck(ctx.PostBody())
	if fe == nil {
		sc.buf, fe = s.request("", &req, &sc.req, sc.buf[:0])
	}
	if fe == nil {
		fe = overCapacity(s.deps.Limiter, "", &sc.req)
	}
	if fe != nil {
		writeBodyError(ctx, fe)
		return
	}
	d := s.deps.Limiter.Allow(context.Background(), &sc.req)
	id := s.res.hold(&d, req.ttl())
	reply.SetRateLimitHeaders(&ctx.Response.Header, &d)
	status := fasthttp.StatusOK
	if d.Unavailable {
		status = fasthttp.StatusServiceUnavailable
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	var scratch [256]byte
	ctx.Response.SetBody(append(appendCheckResult(scratch[:0], &d, sc.req.Peek, id), '\n'))
}

// checkBatch serves POST /v1/ratelimit/check/batch: up to MaxBatchChecks
// checks, decided in order; the answer's results follow the checks' order.
// One invalid check rejects the batch before any is counted.
func (s *Server) checkBatch(ctx *fasthttp.RequestCtx) {
	b, fe := parseBatch(ctx.PostBody())
	reqs := make([]limit.Request, len(b.Checks))
	for i := 0; fe == nil && i < len(b.Checks); i++ {
		prefix := "checks[" + strconv.Itoa(i) + "]."
		if _, fe = s.request(prefix, &b.Checks[i], &reqs[i], nil); fe == nil {
			fe = overCapacity(s.deps.Limiter, prefix, &reqs[i])
		}
	}
	if fe != nil {
		writeBodyError(ctx, fe)
		return
	}
	buf := append(make([]byte, 0, 96*len(b.Checks)+16), `{"results":[`...)
	for i := range b.Checks {
		d := s.deps.Limiter.Allow(context.Background(), &reqs[i])
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendCheckResult(buf, &d, reqs[i].Peek, s.res.hold(&d, b.Checks[i].ttl()))
	}
	buf = append(buf, "]}\n"...)
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(buf)
}

// checkScratch is a check's limiter request and the room for its byte
// fields, reused across checks: the limiter copies what it keeps.
type checkScratch struct {
	req limit.Request
	buf []byte
}

var checkScratches = sync.Pool{New: func() any { return new(checkScratch) }}

// request fills dst, the limiter's request for one valid check: tenant_id
// and its plan, resource, key as the API key, tokens_requested permits,
// request_id as a trusted request ID (when Deps.TrustRequestID). The key and request ID are appended
// to buf, which it returns. A tenant the catalog does not know answers a
// 400: the check API limits tenants as the proxy does, with their plan, so a
// tenant is added through the tenants API (or config) before it is checked.
func (s *Server) request(prefix string, c *checkRequest, dst *limit.Request, buf []byte) ([]byte, *catalog.ValidationError) {
	plan, ok := s.deps.Catalog.TenantPlan(c.TenantID)
	if !ok {
		return buf, badField(prefix+"tenant_id", strconv.Quote(c.TenantID)+" is not a known tenant; add it with PUT /v1/tenants/{id}")
	}
	*dst = limit.Request{
		Tenant:   c.TenantID,
		Plan:     plan,
		Resource: c.Resource,
		Tokens:   c.tokens(),
		Peek:     c.tokens() == 0,
	}
	if c.Cost != nil {
		dst.Cost = *c.Cost
	}
	buf, dst.APIKey = appendField(buf, c.Key)
	buf, dst.Method = appendField(buf, c.Method)
	buf, dst.Host = appendField(buf, c.Host)
	buf, dst.Path = appendField(buf, c.Path)
	if len(c.Headers)+len(c.Query) > 0 {
		dst.Attrs = &checkAttrs{headers: c.Headers, query: c.Query}
	}
	if s.deps.TrustRequestID {
		buf, dst.RequestID = appendField(buf, c.RequestID)
	}
	return buf, nil
}

// appendField appends v to buf and returns both; the field is nil when v
// is empty.
func appendField(buf []byte, v string) ([]byte, []byte) {
	if v == "" {
		return buf, nil
	}
	n := len(buf)
	buf = append(buf, v...)
	return buf, buf[n:len(buf):len(buf)]
}

// appendCheckResult appends the JSON answer of one decision:
// {"allowed":true,"remaining":4,"retry_after_ms":0,"limit":5,"reset_ms":1000}.
// retry_after_ms is -1 when the budget never comes back (token bucket with
// refill 0). shadowed and unavailable appear only when true; a peek
// (tokens_requested 0) lists its limits; reservation is the id of what an
// admitted check holds of its cost and count_if limits ("": none).
func appendCheckResult(dst []byte, d *limit.Decision, peek bool, reservation string) []byte {
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, d.Allowed)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, max(d.Remaining, 0), 10)
	dst = append(dst, `,"retry_after_ms":`...)
	dst = strconv.AppendInt(dst, reply.RetryAfterMillis(d.RetryAfter), 10)
	dst = append(dst, `,"limit":`...)
	dst = strconv.AppendInt(dst, d.Limit, 10)
	dst = append(dst, `,"reset_ms":`...)
	dst = strconv.AppendInt(dst, reply.CeilMillis(d.Reset), 10)
	if d.Shadowed {
		dst = append(dst, `,"shadowed":true`...)
	}
	if d.Unavailable {
		dst = append(dst, `,"unavailable":true,"error":"rate-limit store unavailable"`...)
	}
	if peek {
		dst = appendLimits(dst, d)
	}
	if reservation != "" {
		dst = append(dst, `,"reservation":"`...)
		dst = append(dst, reservation...)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// appendLimits appends a peek's limits, every one that applies, in the
// order they are decided: ,"limits":[{"name":"api_key","limit":5,
// "remaining":4,"reset_ms":1000,"window_ms":1000},...]. window_ms is 0 for
// a token bucket that never refills.
func appendLimits(dst []byte, d *limit.Decision) []byte {
	dst = append(dst, `,"limits":[`...)
	for i, a := range d.Applied[:d.NApplied] {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = strconv.AppendQuote(dst, reply.LimitName(&a))
		dst = append(dst, `,"limit":`...)
		dst = strconv.AppendInt(dst, a.Limit, 10)
		dst = append(dst, `,"remaining":`...)
		dst = strconv.AppendInt(dst, max(a.Remaining, 0), 10)
		dst = append(dst, `,"reset_ms":`...)
		dst = strconv.AppendInt(dst, reply.CeilMillis(a.Reset), 10)
		dst = append(dst, `,"window_ms":`...)
		dst = strconv.AppendInt(dst, reply.CeilMillis(a.Window), 10)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// checkAttrs are a check's headers and query parameters for the policies.
// Header names ignore case, as HTTP's do.
type checkAttrs struct{ headers, query map[string]string }

func (a *checkAttrs) Header(name []byte) []byte {
	if v, ok := a.headers[string(name)]; ok {
		return []byte(v)
	}
	for k, v := range a.headers {
		if strings.EqualFold(k, string(name)) {
			return []byte(v)
		}
	}
	return nil
}

func (a *checkAttrs) Query(name []byte) []byte { return []byte(a.query[string(name)]) }
