package store

import "time"

// quotaKeepMS is how long a quota's counter is kept past its period's end.
// Nothing reads it then (calls of the next period use the next period's
// key); the margin covers a node whose clock steps back a little, as after
// a failover to a replica whose clock differs.
const quotaKeepMS = 60_000

// quotaBounds is the period of p that holds t, in Unix milliseconds (the
// boundaries of every zone are whole seconds).
func quotaBounds(t time.Time, p *Params) (startMS, endMS int64) {
	start, end := p.Period.Bounds(t, p.Zone)
	return start.UnixMilli(), end.UnixMilli()
}

// quotaState is one key of the calendar quota (lua/quota.lua): the count of
// the current period. Redis keeps one counter per period (the period's start
// is in its key); the in-process store keeps the current one only, since a
// call always counts into the period of its own time.
type quotaState struct {
	start int64 // the counted period's start, ms
	last  int64 // newest time seen, ms
	count int64
}

// lease mirrors quota.lua step by step (without the deadline and the
// script's check of the caller's bounds: the in-process store computes
// them from its own clock).
func (s *quotaState) lease(now int64, p *Params, q *leaseQuery) leaseAnswer {
	now = max(now, s.last) // a clock that moves backwards keeps the newest time
	s.last = now
	start, end := quotaBounds(time.UnixMilli(now), p)
	if start != s.start {
		s.start, s.count = start, 0
	}
	if q.ret > 0 && q.retRef == start {
		s.count -= min(q.ret, s.count)
	}
	s.count += quotaUnleased(now, start, q)
	return s.grant(now, start, end, q)
}

// quotaUnleased is how many of the unleased permits q reports were used in
// the period from start: earlier ones
// count in a period that is over, where they no longer matter.
func quotaUnleased(now, start int64, q *leaseQuery) int64 {
	var n int64
	if q.unleased > 0 && now-q.unleasedAgoMS >= start {
		n += q.unleased
	}
	for _, part := range q.before {
		if part[0] > 0 && now-part[1] >= start {
			n += part[0]
		}
	}
	return n
}

// grant grants from the period's budget and fills in the answer.
func (s *quotaState) grant(now, start, end int64, q *leaseQuery) leaseAnswer {
	granted := min(max(q.limit-s.count, 0), q.want)
	if granted < q.need {
		granted = 0
	}
	s.count += granted
	a := leaseAnswer{granted: granted, remaining: max(q.limit-s.count, 0), ref: start}
	if granted == 0 {
		a.retryMS = end - now // the next period's budget
		if q.limit > 0 && q.need > q.limit {
			a.retryMS = -1
		}
	}
	if s.count > 0 {
		a.resetMS, a.freeMS = end-now, end-now
	}
	a.keepMS = end - now + quotaKeepMS
	return a
}
