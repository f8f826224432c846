package limit

import "math"

// bucketState is one key of the token bucket (lua/token_bucket.lua).
type bucketState struct {
	tokens float64
	ts     int64 // newest time seen, ms
	init   bool
}

// lease mirrors token_bucket.lua step by step, with the same float64
// arithmetic in the same order, so both stores give the same answers.
func (s *bucketState) lease(now, capacity int64, rate float64, want int64) leaseAnswer {
	c := float64(capacity)
	if !s.init {
		s.tokens, s.ts, s.init = c, now, true
	}
	now = max(now, s.ts)
	tokens := s.tokens + float64(now-s.ts)*rate/1000
	if tokens > c {
		tokens = c
	}
	granted := min(max(int64(math.Floor(tokens)), 0), want)
	tokens -= float64(granted)
	s.tokens, s.ts = tokens, now

	a := leaseAnswer{granted: granted, remaining: int64(math.Floor(tokens))}
	if granted == 0 {
		if rate <= 0 || capacity < 1 {
			a.retryMS = -1
		} else {
			a.retryMS = int64(math.Ceil((1 - tokens) * 1000 / rate))
		}
	}
	if tokens < c {
		if rate <= 0 {
			a.resetMS = -1
		} else {
			a.resetMS = int64(math.Ceil((c - tokens) * 1000 / rate))
		}
	}
	if rate > 0 {
		a.keepMS = int64(math.Ceil(c*1000/rate)) + 1000
	} else {
		a.keepMS = tokenBucketDayMS
	}
	return a
}
