package limit

// logState is one key of the sliding log (lua/sliding_log.lua). The Redis
// sorted set holds one member per permit; here permits with the same score
// are one run, which counts the same and costs less memory.
type logState struct {
	last int64  // newest time seen, ms
	runs counts // at the lease's expiry (the score); counted while score + window > now
	ids  map[string]int64
}

// lease mirrors sliding_log.lua step by step (without the deadline). Its
// ref and usedRef are the scores of the grant's two runs (the script's are
// members).
func (s *logState) lease(now int64, q *leaseQuery, rid []byte) leaseAnswer {
	now = max(now, s.last)
	s.last = now
	if q.ret > 0 {
		s.runs.unadd(q.retRef, q.ret)
	}
	s.runs.expire(now - q.windowMS)
	s.runs.move(q.retRef, now, q.used)
	if at := now - q.spentAgoMS; q.spent > 0 && at+q.windowMS > now {
		s.runs.add(at, q.spent)
	}
	dup := len(rid) > 0 && s.seen(rid, now)
	used := s.runs.total()
	var granted int64
	if !dup {
		granted = min(max(q.limit-used, 0), q.want)
		if granted < q.need {
			granted = 0
		}
	}
	a := leaseAnswer{duplicate: dup}
	if granted > 0 {
		a.usedRef, a.ref = now+q.useWithinMS, now+q.leaseMS
		s.runs.add(a.usedRef, q.need)
		if granted > q.need {
			s.runs.add(a.ref, granted-q.need)
		}
		used += granted
		if len(rid) > 0 {
			if s.ids == nil {
				s.ids = make(map[string]int64)
			}
			s.ids[string(rid)] = a.ref + q.windowMS
		}
	}
	a.granted, a.remaining = granted, max(q.limit-used, 0)
	if granted == 0 && !dup {
		a.retryMS = s.runs.retry(now, q.limit, used, q.need, q.windowMS)
	}
	a.resetMS = s.runs.resetMS(now, q.windowMS)
	a.keepMS = max(a.resetMS, q.windowMS) + 1000
	for _, forget := range s.ids {
		a.keepMS = max(a.keepMS, forget-now+1000)
	}
	return a
}

// seen reports whether rid was counted and is not yet forgotten, dropping
// forgotten IDs.
func (s *logState) seen(rid []byte, now int64) bool {
	for id, forget := range s.ids {
		if forget <= now {
			delete(s.ids, id)
		}
	}
	_, ok := s.ids[string(rid)]
	return ok
}
