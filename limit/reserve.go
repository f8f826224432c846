package limit

import (
	"context"
	"math"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// MaxReserved bounds Decision.Reserved: the cost, count_if and
// concurrency limits of one request that hold a reservation. Past it a
// request's further ones are settled at once (reserve): a cost at its
// estimate, a slot given back.
const MaxReserved = 4

// Reservation is what an admitted request took of a limit that is settled
// after the answer (catalog.Metered): its estimate, reserved through the
// lease protocol as any permit, and where the permits came from, so that
// Settle gives back what the answer did not cost, where the store counted
// it, or takes what it cost beyond.
//
// A reservation from a lease's permits holds them out of the lease's
// report of used permits: the store counts them where it counted the
// lease until the lease expires plus a window, so a return finds them
// there, whenever the answer ends within that time. One from the Need
// part of a lease call returns where the call counted it. One decided
// without a store answer (a store failure's local share, a strict
// sliding_log request ID) cannot give back: its estimate stands.
type Reservation struct {
	// N is the cost reserved: the estimate, or the request's tokens.
	N int64
	// Meter says how the limit counts (what settles it); Name names the
	// limit as decisions do.
	Meter *catalog.Metered
	Name  string

	b        *bucket
	gen      uint32
	local    bool  // from b's lease gen: b.rare.reserved holds it
	ref      int64 // where a return goes (0: nowhere)
	returnBy int64 // unix nanos: later the permits no longer count
	span     int64 // how long permits taken now count (spec.countsUntil)
	slot     bool  // a concurrency limit's slot: Settle gives it back
	alone    bool  // the slot was taken on the pod's share (use.alone)
	params   store.Params
	counters *catalog.PolicyCounters
}

// ReservedList lists the reservations of an admitted request; the caller
// settles each once (Settle). A refused request holds none.
func (d *Decision) ReservedList() []Reservation { return d.Reserved[:d.NReserved] }

// reserve records the reservations of an admitted request: its metered
// limits' permits (uses, decided by specs). It allocates nothing.
func (l *Limiter) reserve(d *Decision, specs []spec, uses []use, now int64) {
	for i := range specs {
		s := &specs[i]
		if s.meter == nil {
			continue
		}
		u := &uses[i]
		switch {
		case s.meter.Slots > 0 && u.b == nil:
			continue // a slot the failure policy let through open: nothing to give back
		case d.NReserved == MaxReserved:
			unkeptReservations.Inc()
			if s.meter.Slots > 0 {
				l.releaseSlot(u) // not held to the exchange's end: never leaked
			}
			continue // a cost's estimate stands
		}
		r := &d.Reserved[d.NReserved]
		d.NReserved++
		*r = Reservation{N: u.n, Meter: s.meter, Name: s.name, b: u.b, params: s.params, counters: s.counters, span: s.countsUntil(now) - now}
		if s.meter.Slots > 0 {
			r.slot, r.alone = true, u.alone
			s.counters.Slot(1)
			continue
		}
		if r.b == nil {
			r.b = l.table.get(s.key(), now) // where an overdraft waits for the store
		}
		l.holdReserved(r, s, u, now)
		s.counters.Reserve(u.n)
	}
}

// holdReserved marks where r's permits return: b's lease while it is the
// one they came from, the store's count of it or of the call's Need part.
func (l *Limiter) holdReserved(r *Reservation, s *spec, u *use, now int64) {
	switch {
	case u.b == nil:
	case u.usedRef != 0:
		r.ref, r.returnBy = u.usedRef, now+countsFor(&s.params)
	case u.ref != 0:
		b := u.b
		b.mu.Lock()
		if b.gen == u.gen {
			b.rareState().reserved += u.n
			r.local, r.gen, r.ref, r.returnBy = true, u.gen, u.ref, b.returnBy(&s.params)
		}
		b.mu.Unlock()
	}
}

// countsFor is how long permits counted at a call count in the store: a
// window, or for ever as far as a return is concerned (a token bucket's
// tokens and a quota's permits return whenever they come back).
func countsFor(p *store.Params) int64 {
	if p.Algorithm == store.TokenBucket || p.Algorithm == store.Quota || p.Window <= 0 {
		return math.MaxInt64 / 2
	}
	return int64(p.Window)
}

// Settle settles r, a reservation of an admitted request, at actual, what
// the answer cost (its estimate when the answer did not say; 0 when a
// count_if limit does not count its status): what was reserved beyond is
// given back, what it cost beyond is taken, even past the limit (the
// key's next requests wait until the window repays it). It never blocks
// on the store: returns and overdrafts to the store are sent in the
// background, and an overdraft the store does not take waits in the
// key's bucket for its next store call, like permits let through in an
// outage. A concurrency limit's slot is given back, whatever actual.
// Each reservation is settled once; Settle zeroes r.
func (l *Limiter) Settle(r *Reservation, actual int64) {
	if r.b == nil {
		return
	}
	if r.slot {
		l.releaseSlot(&use{b: r.b, alone: r.alone})
		r.counters.Slot(-1)
		*r = Reservation{}
		return
	}
	actual = max(actual, 0)
	now := l.now().UnixNano()
	back, over := r.settleLocally(actual-r.N, now)
	r.counters.Settle(actual, r.N-actual)
	if back > 0 {
		l.giveBack(r, back, now)
		l.wakeWaiters(r.b.key) // what came back may be what a waiting request needs
	}
	if over > 0 {
		l.overdraw(r, over, now)
	}
	*r = Reservation{}
}

// settleLocally settles diff (actual less the estimate) in r's bucket
// while the lease it came from is still the bucket's: a refund goes back
// into the lease, an overdraft takes its unused permits. It returns what
// is left to give back to the store and to take from it.
func (r *Reservation) settleLocally(diff, now int64) (back, over int64) {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	current := r.local && b.gen == r.gen
	if current {
		if b.rare != nil {
			b.rare.reserved = max(b.rare.reserved-r.N, 0)
		}
	}
	if diff < 0 {
		b.forgetRefusal() // the refund may be what the refused request needs
	}
	switch {
	case diff < 0 && current && now < b.expires:
		b.permits -= diff
	case diff < 0 && current:
		b.expired -= diff // returned with the lease's end
	case diff < 0:
		return -diff, 0
	case diff > 0 && current && now < b.expires:
		n := min(diff, b.permits)
		b.permits -= n
		b.uses += n
		return 0, diff - n
	case diff > 0:
		return 0, diff
	}
	return 0, 0
}

// giveBack returns n reserved permits that the answer did not cost to the
// store, where it counted them, while they count there. While the key's
// store breaker is open nothing is sent: the key's next store call, once
// the store answers, returns them (bucket.owe). Otherwise they stay
// counted (lostRefunds): reserved without a lease, or past their count.
func (l *Limiter) giveBack(r *Reservation, n, now int64) {
	req := &store.LeaseRequest{Key: []byte(r.b.key), Params: r.params}
	switch {
	case r.ref == 0 || now >= r.returnBy:
		lostRefunds.Add(int(n))
	case l.shared && l.breakerOut(r.b):
		if !r.b.owe(n, r.ref, r.returnBy) { // it owes permits of another ref
			lostRefunds.Add(int(n))
		}
	case l.shared:
		go l.returnPermits(req, n, r.ref)
	default:
		l.returnPermits(req, n, r.ref)
	}
}

// overdraw takes n permits beyond r's reservation: the store counts them
// now (a report alone, past the limit too); when it cannot, r's bucket
// keeps them for the key's next store call (see bucket.reportLater).
func (l *Limiter) overdraw(r *Reservation, n, now int64) {
	b, p, span := r.b, r.params, r.span
	send := func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.lateWait())
		defer cancel()
		req := &store.LeaseRequest{Key: []byte(b.key), Params: p, Unleased: n, RunWithin: l.cfg.StoreTimeout}
		if _, err := l.store.Lease(ctx, req); err == nil {
			return
		}
		b.mu.Lock()
		b.addUnleased(n, now, unleasedWidth(&p), now+span)
		b.aloneState().fallbackUsed += n // the local share counts it too
		b.mu.Unlock()
		overdraftsKept.Add(int(n))
	}
	if l.shared {
		go send()
		return
	}
	send()
}

// Counters of the settlements that the store could not take at once.
var (
	lostRefunds        = metrics.NewCounter(`sentinel_cost_refunds_lost_total`)
	unkeptReservations = metrics.NewCounter(`sentinel_limit_reservations_unkept_total`)
	overdraftsKept     = metrics.NewCounter(`sentinel_cost_overdrafts_kept_total`)
)

// estimate is the cost that s, a metered limit, reserves for req: the
// check API's Cost, else the limit's estimate (at least 1, so that an
// overdrawn key is refused until the window repays it).
func (l *Limiter) estimate(s *spec, req *Request, tokens int64) int64 {
	if req.Cost > 0 && s.meter.Cost != nil {
		return req.Cost
	}
	return max(s.meter.Estimate(req.Attrs, req.Body, req.BodyLen, tokens), 1)
}

// ReadsBody tells whether a cost limit of a policy of resource estimates
// from the request's JSON body (Request.Body), so that the caller reads
// the body before the decision. It allocates nothing.
func (l *Limiter) ReadsBody(resource string) bool {
	named, any := l.policies.For(resource)
	for _, list := range [...][]*catalog.CompiledPolicy{named, any} {
		for _, p := range list {
			if p.ReadsBody {
				return true
			}
		}
	}
	return false
}
