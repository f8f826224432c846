package store

import "math"

// bucketState is one key of the token bucket (lua/token_bucket.lua).
type bucketState struct {
	tokens float64
	ts     int64 // newest time seen, ms
	init   bool
}

// lease mirrors token_bucket.lua step by step, with the same float64
// arithmetic in the same order, so both stores give the same answers.
func (s *bucketState) lease(now, capacity int64, rate float64, q *leaseQuery) leaseAnswer {
	c := float64(capacity)
	if !s.init {
		s.tokens, s.ts, s.init = c, now, true
	}
	now = max(now, s.ts)
	tokens := s.tokens + float64(now-s.ts)*rate/1000 + float64(q.ret)
	if tokens > c {
		tokens = c
	}
	tokens = max(tokens-float64(q.unleased), 0)
	granted := min(max(int64(math.Floor(tokens)), 0), q.want)
	if granted < q.need {
		granted = 0
	}
	tokens -= float64(granted)
	s.tokens, s.ts = tokens, now

	a := leaseAnswer{granted: granted, remaining: int64(math.Floor(tokens))}
	need := float64(q.need)
	if granted == 0 {
		switch {
		case rate <= 0 || c < need:
			a.retryMS = -1
		case tokens < need:
			a.retryMS = capMS((need - tokens) * 1000 / rate)
		}
	}
	if tokens < c {
		if rate <= 0 {
			a.resetMS = -1
		} else {
			a.resetMS = capMS((c - tokens) * 1000 / rate)
		}
	}
	a.keepMS = tokenBucketDayMS
	if rate > 0 {
		a.keepMS = min(capMS(c*1000/rate)+1000, tokenBucketMaxKeepMS)
	}
	return a
}
