package limit

import "slices"

// logState is one key of the sliding log (lua/sliding_log.lua). The Redis
// sorted set holds one member per permit; here permits with the same score
// are one run, which counts the same and costs less memory.
type logState struct {
	last int64    // newest time seen, ms
	runs []logRun // sorted by score
	ids  map[string]int64
}

type logRun struct {
	score int64 // the lease's expiry, ms; counts while score + window > now
	n     int64
}

// lease mirrors sliding_log.lua step by step.
func (s *logState) lease(now, limit, windowMS, want, leaseMS int64, rid []byte) leaseAnswer {
	now = max(now, s.last)
	s.last = now
	s.expire(now - windowMS)
	dup := len(rid) > 0 && s.seen(rid, now)
	used := s.count()
	var granted int64
	if !dup {
		granted = min(max(limit-used, 0), want)
	}
	if granted > 0 {
		s.add(now+leaseMS, granted)
		used += granted
		if len(rid) > 0 {
			if s.ids == nil {
				s.ids = make(map[string]int64)
			}
			s.ids[string(rid)] = now + leaseMS + windowMS
		}
	}
	a := leaseAnswer{granted: granted, remaining: max(limit-used, 0), duplicate: dup}
	if granted == 0 && !dup {
		a.retryMS = s.retry(now, limit, used, windowMS)
	}
	if n := len(s.runs); n > 0 {
		a.resetMS = s.runs[n-1].score + windowMS - now
	}
	a.keepMS = max(a.resetMS, windowMS) + 1000
	for _, forget := range s.ids {
		a.keepMS = max(a.keepMS, forget-now+1000)
	}
	return a
}

// expire drops the runs with score <= upTo (ZREMRANGEBYSCORE -inf upTo).
func (s *logState) expire(upTo int64) {
	i := 0
	for i < len(s.runs) && s.runs[i].score <= upTo {
		i++
	}
	s.runs = s.runs[:copy(s.runs, s.runs[i:])]
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

func (s *logState) count() int64 {
	var n int64
	for _, r := range s.runs {
		n += r.n
	}
	return n
}

func (s *logState) add(score, n int64) {
	i, found := slices.BinarySearchFunc(s.runs, score, func(r logRun, sc int64) int {
		return cmpInt64(r.score, sc)
	})
	if found {
		s.runs[i].n += n
		return
	}
	s.runs = slices.Insert(s.runs, i, logRun{score: score, n: n})
}

// retry is how long until the (used-limit+1)-th oldest permit stops counting.
func (s *logState) retry(now, limit, used, windowMS int64) int64 {
	if limit <= 0 {
		return windowMS
	}
	need, seen := used-limit+1, int64(0)
	for _, r := range s.runs {
		seen += r.n
		if seen >= need {
			return r.score + windowMS - now
		}
	}
	return 0
}
