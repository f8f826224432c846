package proxy

import (
	"context"
	"sync"
	"time"

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
	// Wait holds a refused request that its limit lets wait (max_wait)
	// until it is admitted or until passes (see limit.Limiter.Wait); the
	// goroutine sleeps meanwhile.
	Wait(ctx context.Context, req *limit.Request, d *limit.Decision, until time.Time) bool
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
		case m.HoldsToTheEnd() && resp.IsBodyStream():
			if st == nil {
				st = acquireSettlement(s.settler)
			}
			st.add(r, nil) // the slot is held until the stream's last byte
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
// cost from a body of contentType when r's limit has a cost to read.
func (st *settlement) add(r *limit.Reservation, contentType []byte) {
	st.res[st.n] = *r
	a := &noActual
	if c := r.Meter.Cost; c != nil {
		a = &c.Actual
	}
	st.meters[st.n].Reset(a, contentType)
	st.n++
}

// noActual reads nothing: a reservation settled whatever the body says.
var noActual cost.Actual

// holdSlots moves x's reservations that last as long as the exchange (the
// slots of concurrency limits) into a settlement that gives them back when
// End is called: the end of a WebSocket's splice. nil when there are none.
func (s *Server) holdSlots(x *exchange) *settlement {
	d := &x.decision
	var st *settlement
	kept := 0
	for i := range d.Reserved[:d.NReserved] {
		r := &d.Reserved[i]
		if s.settler == nil || !r.Meter.HoldsToTheEnd() {
			d.Reserved[kept] = *r
			kept++
			continue
		}
		if st == nil {
			st = acquireSettlement(s.settler)
		}
		st.add(r, nil)
	}
	d.NReserved = kept
	return st
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
