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

// lease mirrors sliding_log.lua step by step (without the deadline). Its
// ref is the score of the grant's run (the script's is the last member).
func (s *logState) lease(now int64, q *leaseQuery, rid []byte) leaseAnswer {
	now = max(now, s.last)
	s.last = now
	if q.ret > 0 {
		s.unadd(q.retRef, q.ret)
	}
	s.expire(now - q.windowMS)
	dup := len(rid) > 0 && s.seen(rid, now)
	used := s.count()
	var granted int64
	if !dup {
		granted = min(max(q.limit-used, 0), q.want)
		if granted < q.need {
			granted = 0
		}
	}
	a := leaseAnswer{duplicate: dup}
	if granted > 0 {
		a.ref = now + q.leaseMS
		s.add(a.ref, granted)
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
		a.retryMS = s.retry(now, q.limit, used, q.need, q.windowMS)
	}
	if n := len(s.runs); n > 0 {
		a.resetMS = s.runs[n-1].score + q.windowMS - now
	}
	a.keepMS = max(a.resetMS, q.windowMS) + 1000
	for _, forget := range s.ids {
		a.keepMS = max(a.keepMS, forget-now+1000)
	}
	return a
}

// unadd uncounts n returned permits from the run with the score.
func (s *logState) unadd(score, n int64) {
	i, found := slices.BinarySearchFunc(s.runs, score, func(r logRun, sc int64) int {
		return cmpInt64(r.score, sc)
	})
	if !found {
		return
	}
	if s.runs[i].n <= n {
		s.runs = slices.Delete(s.runs, i, i+1)
		return
	}
	s.runs[i].n -= n
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

// retry is how long until the (used-limit+need)-th oldest permit stops
// counting; -1 when need is over the limit.
func (s *logState) retry(now, limit, used, need, windowMS int64) int64 {
	if limit <= 0 {
		return windowMS
	}
	if need > limit {
		return -1
	}
	want, seen := used-limit+need, int64(0)
	for _, r := range s.runs {
		seen += r.n
		if seen >= want {
			return r.score + windowMS - now
		}
	}
	return 0
}
