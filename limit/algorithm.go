package limit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Both stores implement each algorithm the same way: the Lua scripts in lua/
// for Redis, the functions in algorithm_*.go for the MemoryStore. Times are
// integer milliseconds; results use the same units as the scripts.

// leaseAnswer is one algorithm's answer, in the scripts' units.
type leaseAnswer struct {
	granted, remaining int64
	retryMS, resetMS   int64 // -1: never
	duplicate          bool
	keepMS             int64 // how long the state must be kept (the key's TTL)
}

func (a *leaseAnswer) result() LeaseResult {
	return LeaseResult{
		Granted:    a.granted,
		Remaining:  a.remaining,
		RetryAfter: fromMS(a.retryMS),
		Reset:      fromMS(a.resetMS),
		Duplicate:  a.duplicate,
	}
}

// fromMS converts script milliseconds to a Duration, keeping -1 ("never") as
// the Duration -1.
func fromMS(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// ceilMS converts d to whole milliseconds, rounding up: a lease or a window is
// never shortened by the conversion.
func ceilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// granularityMS is the sliding window's sub-window width for a window and a
// lease lifetime: 1/40 of the window, but wide enough that the counters alive
// at once (they span window + lease) stay under about 64. Counting by
// sub-windows makes a grant count up to one width longer than exact: a small
// under-use, never an overshoot.
func granularityMS(windowMS, leaseMS int64) int64 {
	g := (windowMS + 39) / 40
	if h := (windowMS + leaseMS + 63) / 64; h > g {
		g = h
	}
	return max(g, 1)
}

// tokenBucketDayMS is how long a bucket that never refills is kept.
const tokenBucketDayMS = 24 * 60 * 60 * 1000

var errNilRequest = errors.New("limit: nil lease request")

// checkLease validates a request before either store runs it.
func checkLease(req *LeaseRequest) error {
	if req == nil {
		return errNilRequest
	}
	if len(req.Key) == 0 {
		return errors.New("limit: lease request without a key")
	}
	if req.Want < 1 {
		return fmt.Errorf("limit: lease of %d permits for %q: want must be >= 1", req.Want, req.Key)
	}
	if req.LeaseTTL < 0 {
		return fmt.Errorf("limit: lease for %q: negative lease TTL %v", req.Key, req.LeaseTTL)
	}
	p := &req.Params
	switch p.Algorithm {
	case SlidingWindow, SlidingLog:
		if p.Window < time.Millisecond {
			return fmt.Errorf("limit: lease for %q: window %v is shorter than 1ms", req.Key, p.Window)
		}
		if p.Limit < 0 {
			return fmt.Errorf("limit: lease for %q: negative limit %d", req.Key, p.Limit)
		}
	case TokenBucket:
		if p.Capacity < 0 {
			return fmt.Errorf("limit: lease for %q: negative capacity %d", req.Key, p.Capacity)
		}
		if p.RefillRate < 0 || math.IsNaN(p.RefillRate) || math.IsInf(p.RefillRate, 0) {
			return fmt.Errorf("limit: lease for %q: refill rate %v is not a finite number >= 0", req.Key, p.RefillRate)
		}
	default:
		return fmt.Errorf("limit: lease for %q: unknown algorithm %d", req.Key, p.Algorithm)
	}
	return nil
}
