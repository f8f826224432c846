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

// lease mirrors sliding_window.lua step by step.
func (s *windowState) lease(now, limit, windowMS, want, leaseMS, g int64) leaseAnswer {
	now = max(now, s.last) // a clock that moves backwards keeps the newest time
	s.last = now
	live, used := s.subs[:0], int64(0)
	for _, b := range s.subs {
		if b.end+windowMS > now {
			live = append(live, b)
			used += b.n
		}
	}
	s.subs = live
	granted := min(max(limit-used, 0), want)
	if granted > 0 {
		s.add((((now+leaseMS)/g)+1)*g, granted)
		used += granted
	}
	a := leaseAnswer{granted: granted, remaining: max(limit-used, 0)}
	if granted == 0 {
		a.retryMS = s.retry(now, limit, used, windowMS)
	}
	if n := len(s.subs); n > 0 {
		a.resetMS = s.subs[n-1].end + windowMS - now
	}
	a.keepMS = max(a.resetMS, windowMS) + 1000
	return a
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
// one permit to be granted.
func (s *windowState) retry(now, limit, used, windowMS int64) int64 {
	if limit <= 0 {
		return windowMS
	}
	need, freed := used-limit+1, int64(0)
	for _, b := range s.subs {
		freed += b.n
		if freed >= need {
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
