package admin

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// settleRequest is the body of POST /v1/ratelimit/settle.
type settleRequest struct {
	// Reservation is the id a check answered.
	Reservation string `json:"reservation"`
	// Cost is what the work cost, for the cost limits (absent: the
	// estimate stands); Status the answer's status, for the count_if
	// limits (absent: it counts).
	Cost   *int64 `json:"cost"`
	Status *int   `json:"status"`
}

func (r *settleRequest) validate() *catalog.ValidationError {
	if fe := checkName("reservation", r.Reservation, true, 64); fe != nil {
		return fe
	}
	if r.Cost != nil && (*r.Cost < 0 || *r.Cost > store.MaxLimit) {
		return badField("cost", "must be between 0 and "+strconv.FormatInt(store.MaxLimit, 10)+", got "+strconv.FormatInt(*r.Cost, 10))
	}
	if r.Status != nil && (*r.Status < 100 || *r.Status > 599) {
		return badField("status", "must be an HTTP status from 100 to 599, got "+strconv.Itoa(*r.Status))
	}
	return nil
}

// settle serves POST /v1/ratelimit/settle: it settles the reservation a
// check on this pod answered, once: what the work did not cost goes back
// to its limits, what it cost beyond is taken (see limit.Limiter.Settle).
// 404: no such open reservation on this pod (never made here, settled,
// or past its reservation_ttl, when it settled at its estimate).
func (s *Server) settle(ctx *fasthttp.RequestCtx) {
	var req settleRequest
	fe := decodeStrict(ctx.PostBody(), &req)
	if fe == nil {
		fe = req.validate()
	}
	if fe != nil {
		writeBodyError(ctx, fe)
		return
	}
	h := s.res.take(req.Reservation)
	if h == nil {
		writeError(ctx, fasthttp.StatusNotFound, "reservation", "no open reservation "+strconv.Quote(req.Reservation)+
			" on this pod: settle on the pod that answered the check, before its reservation_ttl")
		return
	}
	cost, status := int64(-1), 0
	if req.Cost != nil {
		cost = *req.Cost
	}
	if req.Status != nil {
		status = *req.Status
	}
	names, reserved := h.describe()
	got := h.settleAll(s.deps.Limiter.Settle, cost, status)
	b := append(make([]byte, 0, 128), `{"reservation":`...)
	b = strconv.AppendQuote(b, req.Reservation)
	b = append(b, `,"limits":[`...)
	for i := range names[:h.n] {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = strconv.AppendQuote(b, names[i])
		b = append(b, `,"reserved":`...)
		b = strconv.AppendInt(b, reserved[i], 10)
		b = append(b, `,"settled":`...)
		b = strconv.AppendInt(b, got[i], 10)
		b = append(b, '}')
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(append(b, "]}\n"...))
}

// describe names h's limits and what each reserved, before settling
// clears them.
func (h *held) describe() (names [limit.MaxReserved]string, reserved [limit.MaxReserved]int64) {
	for i := range h.res[:h.n] {
		names[i], reserved[i] = h.res[i].Name, h.res[i].N
	}
	return names, reserved
}
