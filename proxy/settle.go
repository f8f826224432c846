package proxy

import (
	"sync"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/cost"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// Settler settles what an admitted request reserved of its cost limits
// once its answer has ended. *limit.Limiter implements it (the proxy
// finds it on its Limiter). Settle must not block on the store.
// ReadsBody tells whether a cost limit of resource estimates from the
// request's JSON body, which the request path then reads before the
// decision; it allocates nothing.
type Settler interface {
	Settle(r *limit.Reservation, actual int64)
	ReadsBody(resource string) bool
}

var _ Settler = (*limit.Limiter)(nil)

// settle settles x's reservations by its answer (ctx.Response): at 0 when
// the request never reached the upstream or its status is one a count_if
// limit does not count; else at the answer's cost — its header, or the
// number its body carries (read as the body streams past: see
// settlement) — or at the estimate when the answer does not say.
func (s *Server) settle(ctx *fasthttp.RequestCtx, x *exchange) {
	d := &x.decision
	resp := &ctx.Response
	status, forwarded := resp.StatusCode(), !x.answeredAt.IsZero()
	if ctx.Hijacked() {
		status, forwarded = fasthttp.StatusSwitchingProtocols, true
	}
	header := func(name string) []byte { return resp.Header.Peek(name) }
	var st *settlement
	for i := range d.Reserved[:d.NReserved] {
		r := &d.Reserved[i]
		switch m := r.Meter; {
		case !forwarded || !m.Counts(status):
			s.settler.Settle(r, 0)
		case m.Cost == nil:
			s.settler.Settle(r, r.N)
		case m.Cost.Actual.Header != "":
			v, ok := m.Cost.Actual.FromHeader(header)
			if !ok {
				v = r.N
			}
			s.settler.Settle(r, v)
		case m.Cost.Actual.NeedsBody():
			if st == nil {
				st = acquireSettlement(s.settler)
			}
			st.add(r, resp.Header.ContentType())
		default:
			s.settler.Settle(r, r.N)
		}
	}
	d.NReserved = 0
	if st == nil {
		return
	}
	if resp.IsBodyStream() && upstream.SetTap(resp, st) {
		return // settled when the stream ends
	}
	_, _ = st.Write(resp.Body())
	st.End(true)
}

// settlement reads the cost of an answer from its body as the body
// streams past (an upstream.Tap), without keeping it: each reservation's
// cost.Meter keeps only the number it looks for. It settles when the
// stream ends, at the estimate when the body did not carry the number
// (the client went away before, or the answer did not say). Pooled.
type settlement struct {
	l      Settler
	res    [limit.MaxReserved]limit.Reservation
	meters [limit.MaxReserved]cost.Meter
	n      int
}

var settlements = sync.Pool{New: func() any { return new(settlement) }}

func acquireSettlement(l Settler) *settlement {
	st := settlements.Get().(*settlement)
	st.l = l
	return st
}

// add takes over r (which is left settled by nobody else) and reads its
// cost from a body of contentType.
func (st *settlement) add(r *limit.Reservation, contentType []byte) {
	st.res[st.n] = *r
	st.meters[st.n].Reset(&r.Meter.Cost.Actual, contentType)
	st.n++
}

// Write feeds a piece of the body to every meter.
func (st *settlement) Write(p []byte) (int, error) {
	for i := range st.n {
		_, _ = st.meters[i].Write(p)
	}
	return len(p), nil
}

// End settles every reservation and puts st back in the pool.
func (st *settlement) End(bool) {
	for i := range st.n {
		r := &st.res[i]
		v, ok := st.meters[i].Value()
		if !ok {
			v = r.N
		}
		st.l.Settle(r, v)
	}
	st.n, st.l = 0, nil
	settlements.Put(st)
}
