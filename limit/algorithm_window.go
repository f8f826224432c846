package limit

import "slices"

// windowState is one key of the sliding window (lua/sliding_window.lua): the
// newest time seen and the live sub-window counters, each keyed by the end of
// its sub-window of lease expiries.
type windowState struct {
	last int64 // newest time seen, ms
	subs []windowSub
}

type windowSub struct {
	end int64 // permits counted here have leases expiring before end (ms)
	n   int64
}

// lease mirrors sliding_window.lua step by step (without the deadline: the
// in-process store checks ctx instead).
func (s *windowState) lease(now int64, q *leaseQuery, g int64) leaseAnswer {
	if q.ret > 0 {
		s.unadd(q.retRef, q.ret)
	}
	now = max(now, s.last) // a clock that moves backwards keeps the newest time
	s.last = now
	live, used := s.subs[:0], int64(0)
	for _, b := range s.subs {
		if b.end+q.windowMS > now {
			live = append(live, b)
			used += b.n
		}
	}
	s.subs = live
	granted := min(max(q.limit-used, 0), q.want)
	if granted < q.need {
		granted = 0
	}
	a := leaseAnswer{}
	if granted > 0 {
		a.ref = (((now + q.leaseMS) / g) + 1) * g
		s.add(a.ref, granted)
		used += granted
	}
	a.granted, a.remaining = granted, max(q.limit-used, 0)
	if granted == 0 {
		a.retryMS = s.retry(now, q.limit, used, q.need, q.windowMS)
	}
	if n := len(s.subs); n > 0 {
		a.resetMS = s.subs[n-1].end + q.windowMS - now
	}
	a.keepMS = max(a.resetMS, q.windowMS) + 1000
	return a
}

// unadd uncounts n returned permits from the sub-window ending at end.
func (s *windowState) unadd(end, n int64) {
	i, found := slices.BinarySearchFunc(s.subs, end, func(b windowSub, e int64) int {
		return cmpInt64(b.end, e)
	})
	if !found {
		return
	}
	if s.subs[i].n <= n {
		s.subs = slices.Delete(s.subs, i, i+1)
		return
	}
	s.subs[i].n -= n
}

// add counts n permits in the sub-window ending at end, keeping subs sorted.
func (s *windowState) add(end, n int64) {
	i, found := slices.BinarySearchFunc(s.subs, end, func(b windowSub, e int64) int {
		return cmpInt64(b.end, e)
	})
	if found {
		s.subs[i].n += n
		return
	}
	s.subs = slices.Insert(s.subs, i, windowSub{end: end, n: n})
}

// retry is how long until enough of the oldest sub-windows stop counting for
// need permits to be granted; -1 when need is over the limit.
func (s *windowState) retry(now, limit, used, need, windowMS int64) int64 {
	if limit <= 0 {
		return windowMS
	}
	if need > limit {
		return -1
	}
	want, freed := used-limit+need, int64(0)
	for _, b := range s.subs {
		freed += b.n
		if freed >= want {
			return b.end + windowMS - now
		}
	}
	return 0
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
