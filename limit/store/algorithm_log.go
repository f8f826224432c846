package store

// logState is one key of the sliding log (lua/sliding_log.lua). The Redis
// sorted set holds one member per permit; here permits with the same score
// are one run, which counts the same and costs less memory.
type logState struct {
	last int64  // newest time seen, ms
	runs counts // at the lease's expiry (the score); counted while score + window > now
	// ids are the request IDs counted by a grant, by ID; forgetMax is
	// the latest of their forget times and swept the size of ids at the
	// last sweep of forgotten IDs (each call checks its own ID's time, so
	// a sweep is only for memory, amortised over the calls since).
	ids       map[string]idRecord
	forgetMax int64
	swept     int
}

// idRecord is one counted request ID: when it is forgotten (ms) and how
// many of its repeats were spared.
type idRecord struct {
	forget, spared int64
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
	s.addUnleased(now, q.unleased, q.unleasedAgoMS, q.windowMS)
	for _, part := range q.before {
		s.addUnleased(now, part[0], part[1], q.windowMS)
	}
	rec, seen := s.lookup(rid, now)
	dup := seen && rec.spared < q.idRetries
	repeated := seen && !dup
	used := s.runs.total()
	var granted int64
	if !dup {
		granted = min(max(q.limit-used, 0), q.want)
		if granted < q.need {
			granted = 0
		}
	}
	a := leaseAnswer{duplicate: dup, repeated: repeated}
	if granted > 0 {
		a.usedRef, a.ref = now+q.useWithinMS, now+q.leaseMS
		s.runs.add(a.usedRef, q.need)
		if granted > q.need {
			s.runs.add(a.ref, granted-q.need)
		}
		used += granted
		// A repeat past its allowance keeps the ID's record: recording it
		// afresh would spare its next repeats again.
		if len(rid) > 0 && !repeated && q.idRetries > 0 && q.idWindowMS > 0 {
			s.record(rid, now+q.idWindowMS)
		}
	}
	if dup {
		rec.spared++
		s.ids[string(rid)] = rec
	}
	a.granted, a.remaining = granted, max(q.limit-used, 0)
	if granted == 0 && !dup {
		a.retryMS = s.runs.retry(now, q.limit, used, q.need, q.windowMS)
	}
	a.resetMS = s.runs.resetMS(now, q.windowMS)
	a.freeMS = s.runs.firstFreeMS(now, q.windowMS)
	a.keepMS = max(a.resetMS, q.windowMS, s.forgetMax-now) + 1000
	return a
}

// lookup returns rid's record while it is not forgotten at now.
func (s *logState) lookup(rid []byte, now int64) (idRecord, bool) {
	if len(rid) == 0 {
		return idRecord{}, false
	}
	rec, ok := s.ids[string(rid)]
	return rec, ok && rec.forget > now
}

// record counts rid until forget, first dropping the forgotten IDs when
// ids has doubled since the last sweep.
func (s *logState) record(rid []byte, forget int64) {
	if s.ids == nil {
		s.ids = make(map[string]idRecord)
	}
	if len(s.ids) >= 2*max(s.swept, 8) {
		for id, rec := range s.ids {
			if rec.forget <= s.last { // s.last: the time of this call
				delete(s.ids, id)
			}
		}
		s.swept = len(s.ids)
	}
	s.ids[string(rid)] = idRecord{forget: forget}
	s.forgetMax = max(s.forgetMax, forget)
}

// addUnleased counts n permits let through agoMS before now, at that time,
// unless they are out of the window already.
func (s *logState) addUnleased(now, n, agoMS, windowMS int64) {
	if n > 0 && agoMS < windowMS {
		s.runs.add(now-agoMS, n)
	}
}
