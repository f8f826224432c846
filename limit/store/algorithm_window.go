package store

// windowState is one key of the sliding window (lua/sliding_window.lua): the
// newest time seen and the live sub-window counters, each at the end of its
// sub-window of lease expiries (permits counted there have leases expiring
// before it).
type windowState struct {
	last int64 // newest time seen, ms
	subs counts
}

// lease mirrors sliding_window.lua step by step (without the deadline: the
// in-process store checks ctx instead).
func (s *windowState) lease(now int64, q *leaseQuery, g int64) leaseAnswer {
	now = max(now, s.last) // a clock that moves backwards keeps the newest time
	if q.ret > 0 {
		s.subs.unadd(q.retRef, q.ret)
	}
	s.subs.move(q.retRef, ((now/g)+1)*g, q.used)
	s.countUnleased(now, q.unleased, q.unleasedAgoMS, q.windowMS, g)
	for _, part := range q.before {
		s.countUnleased(now, part[0], part[1], q.windowMS, g)
	}
	s.last = now
	s.subs.expire(now - q.windowMS)
	used := s.subs.total()
	granted := min(max(q.limit-used, 0), q.want)
	if granted < q.need {
		granted = 0
	}
	a := leaseAnswer{}
	if granted > 0 {
		a.usedRef = (((now + q.useWithinMS) / g) + 1) * g
		a.ref = (((now + q.leaseMS) / g) + 1) * g
		s.subs.add(a.usedRef, q.need)
		if granted > q.need {
			s.subs.add(a.ref, granted-q.need)
		}
		used += granted
	}
	a.granted, a.remaining = granted, max(q.limit-used, 0)
	if granted == 0 {
		a.retryMS = s.subs.retry(now, q.limit, used, q.need, q.windowMS)
	}
	a.resetMS = s.subs.resetMS(now, q.windowMS)
	a.freeMS = s.subs.firstFreeMS(now, q.windowMS)
	a.keepMS = max(a.resetMS, q.windowMS) + 1000
	return a
}

// countUnleased counts n permits let through agoMS before now, at the end of their
// sub-window, unless they are out of the window already.
func (s *windowState) countUnleased(now, n, agoMS, windowMS, g int64) {
	if at := (((now - agoMS) / g) + 1) * g; n > 0 && at+windowMS > now {
		s.subs.add(at, n)
	}
}
