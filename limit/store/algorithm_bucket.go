package store

import (
	"cmp"
	"math"
	"slices"
)

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
		if q.level > 0 { // made before the key's expiry: a lost key (LeaseRequest.Level)
			if was := float64(q.level-1) + float64(q.levelAgoMS)*rate/1000; was < c {
				s.tokens = was
			}
		}
	}
	now = max(now, s.ts)
	tokens, ts := s.takeUnleased(now, c, rate, q)
	tokens = tokens + float64(now-ts)*rate/1000 + float64(q.ret)
	if tokens > c {
		tokens = c
	}
	granted := min(max(int64(math.Floor(tokens)), 0), q.want)
	if granted < q.need {
		granted = 0
	}
	tokens -= float64(granted)
	s.tokens, s.ts = tokens, now

	a := leaseAnswer{granted: granted, remaining: max(int64(math.Floor(tokens)), 0)}
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

// takeUnleased takes q's unleased tokens from the bucket, each part at its
// time (now less its ago), oldest first, refilled up to each; a part older
// than the bucket's last call is taken at that call's time. It returns the
// tokens left and the time they are at.
func (s *bucketState) takeUnleased(now int64, c, rate float64, q *leaseQuery) (float64, int64) {
	var takes [UnleasedParts + 1][2]int64 // time (ms), tokens
	n := 0
	if q.unleased > 0 {
		takes[n], n = [2]int64{now - q.unleasedAgoMS, q.unleased}, n+1
	}
	for _, part := range q.before {
		if part[0] > 0 {
			takes[n], n = [2]int64{now - part[1], part[0]}, n+1
		}
	}
	slices.SortFunc(takes[:n], func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	tokens, ts := s.tokens, s.ts
	alone := q.want == 0 && q.ret == 0
	for _, take := range takes[:n] {
		if take[0] > ts {
			tokens += float64(take[0]-ts) * rate / 1000
			if tokens > c {
				tokens = c
			}
			ts = take[0]
		}
		// A report alone takes the bucket below empty (see token_bucket.lua).
		floor := min(tokens, 0)
		if tokens -= float64(take[1]); tokens < floor && !alone {
			tokens = floor
		}
	}
	return tokens, ts
}
