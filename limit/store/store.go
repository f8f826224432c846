package store

import (
	"context"
	"errors"
	"time"
)

// Algorithm names a rate-limiting algorithm. Each one is a Lua script under lua/
// and an equivalent implementation in the in-memory store. The zero value is
// no algorithm: a configuration that leaves it out (a rule without one takes
// limits.algorithm), and a lease request the stores refuse.
type Algorithm uint8

const (
	// SlidingWindow is a ring of sub-window counters per key (a LeapArray, as
	// Alibaba Sentinel calls it). It is the default.
	SlidingWindow Algorithm = iota + 1
	// SlidingLog is a sorted set of request IDs, exact to the millisecond.
	SlidingLog
	// TokenBucket is a bucket with a capacity and a refill rate.
	TokenBucket
	// Quota is a calendar quota: Limit permits per Period (an hour, a day,
	// a week, a month, a year in Zone), one plain counter per period.
	Quota
)

// Params are the parameters of one limit as the store sees them.
// Limit and Window apply to the sliding algorithms; Capacity and RefillRate to
// TokenBucket; Limit, Period and Zone to Quota.
type Params struct {
	Algorithm  Algorithm
	Limit      int64         // permits per Window (sliding algorithms), per Period (Quota)
	Window     time.Duration // window length (sliding algorithms); unused by Quota
	Capacity   int64         // bucket size (token bucket)
	RefillRate float64       // permits per second (token bucket); 0: never refills
	// Period is the calendar period of a quota (Quota only; NoPeriod for
	// the other algorithms): Limit permits from each start of the period
	// to its end, in Zone.
	Period Period
	// Zone is the time zone of the Period's boundaries (nil: UTC). It is
	// part of the limit rather than of a store so that the Redis store and
	// the limiter's in-process fallback, which see the same Params, never
	// disagree on a boundary, and so that a limit may have its own zone.
	// Changing it moves the boundaries, and so starts a new counter.
	Zone *time.Location
}

// LeaseRequest asks the store for up to Want permits of one key.
type LeaseRequest struct {
	// Key is the full store key, including its Redis Cluster hash tag. The store
	// must not keep it after Lease returns.
	Key []byte
	// Kept, when not empty, is Key as a string that the caller keeps
	// (and, like any string, never changes): a store that keeps the key
	// keeps this one rather than a copy of its own, so that the pod holds
	// its bytes once (the in-memory store).
	Kept   string
	Params Params
	// Want is the number of permits asked for (Need..MaxLimit; at most
	// MaxLogTokens for sliding_log); the store grants 0 or Need..Want. 0
	// with a Return: a return alone. 0 with Unleased or UnleasedBefore
	// (and no Return nor Used): a report alone, which counts them (past
	// the limit too: a cost settled over its estimate) and grants nothing.
	// 0 with neither: a look, which takes nothing and changes no count
	// (so another caller can never be refused because of it) and answers
	// the Remaining budget, and the RetryAfter of Need permits (0 when
	// they remain).
	Want int64
	// Need is the fewest permits worth granting (0 means 1): when fewer are
	// available the store grants none and takes nothing, so a request for n
	// tokens is granted all of them or none. A lease may be partial above it.
	Need int64
	// Return returns unused permits of an earlier lease on the same key
	// and params (0: none), counted where that lease was counted (ReturnRef,
	// the lease's LeaseResult.Ref), before anything is granted. The caller
	// must never use returned permits, and must return each permit at most
	// once: a return whose answer is lost is not sent again. At most the
	// lease's Granted; at most MaxLogTokens for sliding_log.
	Return    int64
	ReturnRef int64
	// Used reports how many of that earlier lease's other permits (those
	// before the returned ones) the caller has used by now: the sliding
	// algorithms count them from this call for a window instead of until
	// the lease's expiry plus the window (they were counted since the
	// grant, so every use made by now stays covered). A lease used up
	// early then frees its budget a window after its use. At most the
	// lease's permits beyond its Need, less Return.
	Used int64
	// Unleased reports how many permits the caller used without a lease
	// while the store was unreachable (its share under the local failure
	// policy), since its last call that reached the store: the store counts them from this call, so that when it answers again it
	// does not grant the window's whole budget on top of them. Only a call
	// that runs in time counts them (RedisStore: before its deadline): the
	// caller of a call that failed reports them again. For sliding_log,
	// Unleased and UnleasedBefore together at most MaxLogTokens.
	Unleased int64
	// UnleasedAgo is how long before this call the last of the Unleased
	// permits was used (0..MaxWindow): every algorithm counts them from
	// then (a token bucket takes them then), measured on the caller's clock
	// as a duration, so the two clocks need not agree.
	UnleasedAgo time.Duration
	// UnleasedBefore are more permits used without a lease, earlier
	// than Unleased's, each part counted from its own Ago (0..MaxWindow): a
	// report after a long failure dates each part of the last window where
	// it was used, so that the store neither forgets them nor counts a
	// whole window of them as just used, which would refuse a client under
	// its limit for a window. Every algorithm places each part at its time:
	// sliding_window in that time's sub-window, sliding_log as members
	// scored then (Unleased and the parts together at most MaxLogTokens),
	// token_bucket by taking the parts from the bucket in the order of
	// their times, refilled up to each (a part older than the bucket's
	// last call is taken then), and a quota in the current period when it
	// was used in it.
	UnleasedBefore [UnleasedParts]UnleasedPart
	// UseWithin is how long after the call the caller may still use the
	// Need permits (the time it waits for the answer; later it returns
	// them): the sliding algorithms count them from the call plus UseWithin.
	// 0..1h.
	UseWithin time.Duration
	// RunWithin, when not 0, is how long after the call the store may still
	// run it: a call run later grants nothing and counts no Unleased (as one
	// past ctx's deadline), so that a caller that stopped waiting for the
	// answer at RunWithin knows that a call still running then will take
	// nothing it reported. 0..1h; RedisStore only (the in-process store runs
	// every call at once).
	RunWithin time.Duration
	// LeaseTTL is how long the caller may keep unused permits before it drops
	// them. The store counts the lease's permits beyond Need as living until
	// its expiry plus the window (or until Used reports them used), so that no
	// window holds more uses than the limit.
	LeaseTTL time.Duration
	// RequestID, when set, lets sliding_log spare a retry: a call with an
	// ID that a granted call of the key counted less than RequestIDWindow
	// ago takes nothing (Duplicate), at most RequestIDRetries times; a
	// repeat past either is counted as a new request (Repeated). Callers
	// set it only when the ID comes from a source trusted for it: each
	// counted ID can pass RequestIDRetries more requests.
	RequestID []byte
	// RequestIDRetries is how many repeats of a counted RequestID are
	// spared (0..MaxRequestIDRetries; 0: none, every call counts).
	RequestIDRetries int64
	// RequestIDWindow is how long after the counted call its repeats are
	// spared (0..MaxWindow); the first call after it counts afresh.
	RequestIDWindow time.Duration
	// Level, when LevelKnown, is what the caller's last answer for a token
	// bucket's key left (its Remaining, 0..Capacity), LevelAgo (0..MaxWindow)
	// before this call on the caller's clock. A store that has no key
	// makes it at that level plus the refill since, when that is under the
	// capacity, instead of full: it lost the key (emptied, or a replica
	// promoted before it had the key's last writes), since a key expires
	// only once its bucket would be full again, and the caller's last
	// answer bounds what the bucket holds now. Other algorithms ignore it.
	Level      int64
	LevelAgo   time.Duration
	LevelKnown bool
}

// levelArg is Level as the token bucket's script takes it: one more, 0
// when not known.
func (r *LeaseRequest) levelArg() int64 {
	if !r.LevelKnown {
		return 0
	}
	return r.Level + 1
}

// MaxRequestIDRetries is the most repeats of one request ID a store spares.
const MaxRequestIDRetries = 15

// UnleasedParts is the number of parts of LeaseRequest.UnleasedBefore.
const UnleasedParts = 8

// UnleasedPart is N permits used without a lease, the last of them Ago
// before the call.
type UnleasedPart struct {
	N   int64
	Ago time.Duration
}

// LeaseResult is the store's answer to a LeaseRequest.
type LeaseResult struct {
	Granted    int64         // permits granted, 0..Want
	Remaining  int64         // budget left in the current window after this grant
	RetryAfter time.Duration // when a permit may next be granted; 0 if granted; -1 never
	Reset      time.Duration // until the budget is whole again (the last counted permit leaves)
	// FirstFree is until the first (oldest) counted permit leaves the
	// window: the budget grows back from then until Reset, as the counted
	// permits leave. 0 when nothing is counted, and for TokenBucket, whose
	// refill grows it back from now on.
	FirstFree time.Duration
	Duplicate bool // RequestID repeats within its allowance: nothing new was taken
	Repeated  bool // RequestID repeats past its allowance: counted as a new request
	// NoRoom tells that a MemoryStore refused a new key for want of room
	// (every key it holds is exhausted, twice MaxKeys of them), not for its
	// budget: nothing was counted.
	NoRoom bool
	// Ref says where the grant's leased permits (Granted - Need, those the
	// caller may hold) were counted, for a later Return; opaque.
	Ref int64
	// UsedRef says where the Need permits the caller uses at once were
	// counted: the sliding algorithms count them from the time of the call,
	// not until the lease expires. 0 when they count with the rest, at Ref
	// (token_bucket; quota, whose Ref is the period's start: every permit
	// of a period counts until its end). Opaque; Need permits returned go
	// there.
	UsedRef int64
	// Seq numbers the store's calls for the key: one more than the last
	// call's, from 1 when the key is made anew, which a store does only once
	// no permit of it counts any more, unless it lost writes (emptied, or a
	// replica promoted before it had them). 0 when the store does not number
	// them (the in-process store, which cannot lose them; calendar
	// quotas).
	Seq int64
	// MadeAgo is how long before the call the store made the key anew: at
	// its call numbered 1. A pod whose last answer for the key came before
	// then knows that the store lost every permit it had granted the pod
	// for the key; a replica promoted before it had the last writes keeps
	// the time. -1 when the store does not say (Seq 0, token_bucket, a key
	// written by an older script).
	MadeAgo time.Duration
}

// Store grants permits atomically for one key. Implementations must be safe
// for concurrent use; Lease must honour ctx's deadline and never block past it,
// and a call that fails because of the deadline must not leave permits
// granted that nobody can use (RedisStore sends the deadline with the call,
// in Redis' clock, and the script grants nothing after it).
//
// Slots takes and gives back slots of a concurrency limit (SlotRequest) for
// one pod and renews the pod's lease on them, under the same contract as
// Lease. The store drops the leases that have expired before counting, and
// a pod whose count falls to 0 has its lease removed. Its keys are not
// Lease's: Reset leaves them alone.
//
// Reset drops every count of a key, so that its budget is whole again; p
// is the limit's params (a quota counts per period, and p says the period
// and its zone; the other algorithms' keys do not depend on it).
type Store interface {
	Lease(ctx context.Context, req *LeaseRequest) (LeaseResult, error)
	Slots(ctx context.Context, req *SlotRequest) (SlotResult, error)
	Reset(ctx context.Context, key []byte, p Params) error
	Ping(ctx context.Context) error
	Close()
}

// ErrStoreLate is returned when the store ran the call after its deadline
// and so granted nothing.
var ErrStoreLate = errors.New("limit: store ran the call after its deadline")
