package store

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Both stores implement each algorithm the same way: the Lua scripts in lua/
// for Redis, the functions in algorithm_*.go for the MemoryStore. Times are
// integer milliseconds; results use the same units as the scripts.

// leaseAnswer is one algorithm's answer, in the scripts' units.
type leaseAnswer struct {
	granted, remaining int64
	retryMS, resetMS   int64 // -1: never
	freeMS             int64 // until the first counted permit leaves the window
	duplicate          bool  // a request ID's spared repeat: nothing taken
	repeated           bool  // a request ID's repeat past its allowance: counted
	late               bool  // run after the call's deadline: nothing granted
	stale              bool  // quota: the period sent does not hold the node's clock; nothing done
	ref                int64 // where the leased permits (granted - need) were counted, for a return
	usedRef            int64 // where the need permits were counted; 0: with the rest, at ref
	keepMS             int64 // how long the state must be kept (the key's TTL)
	seq                int64 // the key's call number (LeaseResult.Seq)
	madeMS             int64 // how long ago the key was made (LeaseResult.MadeAgo); -1: not known
}

func (a *leaseAnswer) result() LeaseResult {
	r := LeaseResult{
		Granted:    a.granted,
		Remaining:  a.remaining,
		RetryAfter: fromMS(a.retryMS),
		Reset:      fromMS(a.resetMS),
		FirstFree:  fromMS(a.freeMS),
		Duplicate:  a.duplicate,
		Repeated:   a.repeated,
		Ref:        a.ref,
		UsedRef:    a.usedRef,
		Seq:        a.seq,
		MadeAgo:    -1,
	}
	if a.seq > 0 && a.madeMS >= 0 {
		r.MadeAgo = time.Duration(a.madeMS) * time.Millisecond
	}
	return r
}

// fromMS converts script milliseconds to a Duration, keeping -1 ("never") as
// the Duration -1.
func fromMS(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(min(ms, maxAnswerMS)) * time.Millisecond
}

// maxAnswerMS caps the times in an answer (as the scripts do): 10^12 ms,
// about 31 years, well inside a Duration.
const maxAnswerMS = 1_000_000_000_000

// capMS rounds a time in ms up to an integer and caps it at maxAnswerMS, as
// the scripts' ms() does.
func capMS(ms float64) int64 {
	return int64(math.Min(math.Ceil(ms), maxAnswerMS))
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

// tokenBucketDayMS is how long a bucket that never refills is kept, and
// tokenBucketMaxKeepMS the longest any bucket is kept (400 days).
const (
	tokenBucketDayMS     = 24 * 60 * 60 * 1000
	tokenBucketMaxKeepMS = 400 * tokenBucketDayMS
)

var errNilRequest = errors.New("limit: nil lease request")

// checkLease validates a request before either store runs it: the scripts
// rely on these bounds.
func checkLease(req *LeaseRequest) error {
	if req == nil {
		return errNilRequest
	}
	if len(req.Key) == 0 {
		return errors.New("limit: lease request without a key")
	}
	switch {
	case req.Want == 0 && req.Return > 0:
		// A return alone: nothing is granted.
	case req.Want == 0 && req.Return == 0 && req.reports():
		// A report alone: counted, nothing granted (a cost settled over
		// its estimate).
		if req.Used != 0 {
			return fmt.Errorf("limit: report at %q: a report alone has no lease whose use it reports", req.Key)
		}
	case req.Want == 0:
		// A look changes no count, so it reports none.
		if req.Used != 0 || req.Unleased != 0 || req.UnleasedBefore != ([UnleasedParts]UnleasedPart{}) || req.Need > MaxLimit {
			return fmt.Errorf("limit: look at %q: a look takes and reports nothing, and needs at most %d", req.Key, int64(MaxLimit))
		}
	case req.Want < 1 || req.Want > MaxLimit || req.Want < req.need():
		return fmt.Errorf("limit: lease of %d permits for %q: want must be in need (%d)..%d", req.Want, req.Key, req.need(), int64(MaxLimit))
	}
	if req.LeaseTTL < 0 || req.LeaseTTL > time.Hour {
		return fmt.Errorf("limit: lease for %q: lease TTL %v is out of range [0, 1h]", req.Key, req.LeaseTTL)
	}
	if req.RunWithin < 0 || req.RunWithin > time.Hour {
		return fmt.Errorf("limit: lease for %q: run within %v is out of range [0, 1h]", req.Key, req.RunWithin)
	}
	if req.UseWithin < 0 || req.UseWithin > time.Hour {
		return fmt.Errorf("limit: lease for %q: use within %v is out of range [0, 1h]", req.Key, req.UseWithin)
	}
	if req.Return < 0 || req.Return > MaxLimit {
		return fmt.Errorf("limit: lease for %q: return of %d permits is out of range", req.Key, req.Return)
	}
	if req.Used < 0 || req.Used > MaxLimit || req.Unleased < 0 || req.Unleased > MaxLimit {
		return fmt.Errorf("limit: lease for %q: %d used or %d unleased permits is out of range", req.Key, req.Used, req.Unleased)
	}
	if req.RequestIDRetries < 0 || req.RequestIDRetries > MaxRequestIDRetries || req.RequestIDWindow < 0 || req.RequestIDWindow > MaxWindow {
		return fmt.Errorf("limit: lease for %q: request ID allowance of %d retries within %v is out of range 0..%d within [0, %v]",
			req.Key, req.RequestIDRetries, req.RequestIDWindow, MaxRequestIDRetries, MaxWindow)
	}
	if err := checkUnleased(req); err != nil {
		return err
	}
	if req.LevelKnown && (req.Level < 0 || req.Level > MaxLimit || req.LevelAgo < 0 || req.LevelAgo > MaxWindow) {
		return fmt.Errorf("limit: lease for %q: a level of %d %v ago is out of range 0..%d, [0, %v]", req.Key, req.Level, req.LevelAgo, MaxLimit, MaxWindow)
	}
	return checkParams(req)
}

// checkUnleased validates the unleased permits a request reports (Unleased,
// UnleasedAgo, UnleasedBefore).
func checkUnleased(req *LeaseRequest) error {
	if req.UnleasedAgo < 0 || req.UnleasedAgo > MaxWindow {
		return fmt.Errorf("limit: lease for %q: unleased permits %v ago is out of range [0, %v]", req.Key, req.UnleasedAgo, MaxWindow)
	}
	for _, part := range req.UnleasedBefore {
		switch {
		case part.N < 0 || part.N > MaxLimit || part.Ago < 0 || part.Ago > MaxWindow:
			return fmt.Errorf("limit: lease for %q: %d unleased permits %v ago is out of range", req.Key, part.N, part.Ago)
		}
	}
	if req.Params.Algorithm == SlidingLog && unleasedTotal(req) > MaxLogTokens {
		return fmt.Errorf("limit: lease for %q: sliding_log counts at most %d unleased permits per call", req.Key, MaxLogTokens)
	}
	return nil
}

// unleasedTotal is the permits req reports as used without a lease.
func unleasedTotal(req *LeaseRequest) int64 {
	n := req.Unleased
	for _, part := range req.UnleasedBefore {
		n += part.N
	}
	return n
}

// checkParams validates a request's params, and its counts against them.
func checkParams(req *LeaseRequest) error {
	p := &req.Params
	if p.Period != NoPeriod && p.Algorithm != Quota {
		return fmt.Errorf("limit: lease for %q: a period (%s) is for the quota algorithm only, not %s", req.Key, p.Period, p.Algorithm)
	}
	switch p.Algorithm {
	case SlidingWindow, SlidingLog:
		if p.Window < time.Millisecond || p.Window > MaxWindow {
			return fmt.Errorf("limit: lease for %q: window %v is out of range [1ms, %v]", req.Key, p.Window, MaxWindow)
		}
		if p.Limit < 0 || p.Limit > MaxLimit {
			return fmt.Errorf("limit: lease for %q: limit %d is out of range 0..%d", req.Key, p.Limit, int64(MaxLimit))
		}
		if p.Algorithm == SlidingLog && (req.Want > MaxLogTokens || req.Return > MaxLogTokens || req.Used > MaxLogTokens || req.Unleased > MaxLogTokens) {
			return fmt.Errorf("limit: lease for %q: sliding_log grants and returns at most %d permits per call", req.Key, MaxLogTokens)
		}
	case TokenBucket:
		if p.Capacity < 0 || p.Capacity > MaxLimit {
			return fmt.Errorf("limit: lease for %q: capacity %d is out of range 0..%d", req.Key, p.Capacity, int64(MaxLimit))
		}
		if err := CheckRefill(p.Capacity, p.RefillRate); err != "" {
			return fmt.Errorf("limit: lease for %q: refill rate %v %s", req.Key, p.RefillRate, err)
		}
	case Quota:
		// Limit 0 is allowed as for the sliding algorithms: a limit scaled
		// down to nothing refuses until the next period.
		if p.Period < Hour || p.Period > Year {
			return fmt.Errorf("limit: lease for %q: a quota needs a period (hour, day, week, month or year), not %d", req.Key, p.Period)
		}
		if p.Limit < 0 || p.Limit > MaxLimit {
			return fmt.Errorf("limit: lease for %q: limit %d is out of range 0..%d", req.Key, p.Limit, int64(MaxLimit))
		}
		// Window is unused; a caller may set it to the period's length for
		// its answers' headers.
		if p.Window < 0 || p.Window > MaxPeriod {
			return fmt.Errorf("limit: lease for %q: window %v is out of range [0, %v]", req.Key, p.Window, MaxPeriod)
		}
	default:
		return fmt.Errorf("limit: lease for %q: unknown algorithm %d", req.Key, p.Algorithm)
	}
	return nil
}

// CheckRefill says what is wrong with a refill rate of a bucket of capacity
// permits, or "": a rule is checked with it before it is stored, a lease
// request before it runs.
func CheckRefill(capacity int64, rate float64) string {
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0:
		return "is not a finite number >= 0"
	case rate == 0:
		return ""
	case rate < MinRefillRate || rate > MaxLimit:
		return fmt.Sprintf("is out of range: 0 (never refills) or %g..%g permits per second", MinRefillRate, float64(MaxLimit))
	case float64(capacity)/rate > MaxRefillTime.Seconds():
		return fmt.Sprintf("is too slow: capacity / refill_rate (the time to refill) is at most %v", MaxRefillTime)
	}
	return ""
}

// need is Need with its default of 1.
func (r *LeaseRequest) need() int64 { return max(r.Need, 1) }

// IsLook reports whether r is a look: Want 0 without a Return or a report.
func (r *LeaseRequest) IsLook() bool { return r.Want == 0 && r.Return == 0 && !r.reports() }

// reports tells whether r reports permits used without a lease.
func (r *LeaseRequest) reports() bool {
	return r.Unleased != 0 || r.UnleasedBefore != ([UnleasedParts]UnleasedPart{})
}

// resultFor is the answer to req. The algorithms answer a look's
// RetryAfter as a refusal's (they grant nothing); a look that finds Need
// permits is not refused, so its RetryAfter is 0.
func (a *leaseAnswer) resultFor(req *LeaseRequest) LeaseResult {
	r := a.result()
	if req.IsLook() && r.Remaining >= req.need() {
		r.RetryAfter = 0
	}
	return r
}

// algorithmNames maps the configuration names to algorithms.
var algorithmNames = map[string]Algorithm{
	"sliding_window": SlidingWindow,
	"sliding_log":    SlidingLog,
	"token_bucket":   TokenBucket,
}

// ParseAlgorithm returns the algorithm of a configuration name.
func ParseAlgorithm(name string) (Algorithm, error) {
	a, ok := algorithmNames[name]
	if !ok {
		return 0, fmt.Errorf("%q is not one of sliding_window, sliding_log, token_bucket", name)
	}
	return a, nil
}

// String returns the configuration name of the algorithm ("" for none).
func (a Algorithm) String() string {
	switch a {
	case 0:
		return ""
	case SlidingWindow:
		return "sliding_window"
	case SlidingLog:
		return "sliding_log"
	case TokenBucket:
		return "token_bucket"
	case Quota:
		return "quota"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// MarshalText returns the configuration name, so that the rules API and the
// rules kept in Redis spell an algorithm as the configuration does.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText parses a configuration name; empty text is no algorithm,
// as an absent key is.
func (a *Algorithm) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(a, text, ParseAlgorithm)
}

// UnmarshalJSON reads a JSON string as UnmarshalText does; a bad value is
// a *json.UnmarshalTypeError that names the field.
func (a *Algorithm) UnmarshalJSON(b []byte) error { return confutil.UnmarshalJSONText(b, a) }
