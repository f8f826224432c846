package store

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// memoryShards is the most independently locked parts of a MemoryStore.
const memoryShards = 256

// minShardKeys is the fewest keys a shard of a MemoryStore or of a
// limiter's bucket table is made to hold, when MaxKeys allows: a full shard
// makes room by evicting from its own keys, so a shard of one or two keys
// evicts whatever key a new one hashes next to, a busy client's counts
// among them, however many idle keys the other shards hold.
const minShardKeys = 16

// ShardsFor is the number of shards (a power of two, 1 to most) for a table
// of maxKeys: as many as hold minShardKeys each.
func ShardsFor(maxKeys, most int) int {
	n := 1
	for n*2 <= most && n*2*minShardKeys <= maxKeys {
		n *= 2
	}
	return n
}

// MemoryOptions configure a MemoryStore. The zero value is usable.
type MemoryOptions struct {
	// MaxKeys bounds the number of keys kept (limits.max_keys). When the
	// store is full, a new key gets an entry of its own: room is made by
	// dropping an expired key, else a key whose budget is whole, else the
	// least used key that is not exhausted; exhausted keys are kept, up to
	// twice MaxKeys of them (see makeRoom). No new key shares a budget
	// with another. Rounded down to a multiple of the shards, at least
	// one per shard. Default 1<<20.
	MaxKeys int
	// Shards is the number of independently locked parts, a power of two
	// up to 256, each bounded by its part of MaxKeys. 0 (or another value)
	// picks as many as hold 16 keys each (ShardsFor): a full shard evicts
	// from its own keys, so one of a key or two would evict a busy key
	// for whatever new key hashes next to it.
	Shards int
	// Role names the store in the metrics of full tables. Default
	// RoleStore.
	Role MemoryRole
	// Now returns the current time. Default time.Now; tests inject a clock.
	Now func() time.Time
	// SweepInterval is how often expired keys are dropped in the background.
	// Default 1s.
	SweepInterval time.Duration
}

// MemoryStore is the in-process Store: the same algorithms and lease
// accounting as the Redis scripts, for a single instance. Keys are spread
// over up to 256 shards by xxhash, each with its own mutex, so there is no global
// lock; expired keys are swept in the background and the number of keys is
// bounded by MaxKeys.
type MemoryStore struct {
	now       func() time.Time
	perShard  atomic.Int64 // MaxKeys spread over the shards
	mask      uint64       // the shards in use, less one (a power of two)
	shards    [memoryShards]memoryShard
	evictions *memoryEvictions
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
}

type memoryShard struct {
	// mu protects m and soonest. Do not use sync.RWMutex: every Lease writes.
	mu sync.Mutex
	m  map[string]*memoryEntry
	// soonest is at or before the earliest expiry in m: while now is before
	// it, a full shard has nothing to drop and is not scanned.
	soonest int64
}

// memoryEntry is one key's state. Its algorithm's state (a *windowState,
// *logState, *bucketState, *quotaState or *slotsState) is made by the first
// lease: the four inline took 176 bytes of every key, most of a rare key's
// entry. The state's type tells the algorithm (alg), so that an entry is
// 48 bytes, not 64.
type memoryEntry struct {
	expireAt int64 // ms, like the Redis key's TTL
	// What the last answer left (see keep): the budget left, the whole
	// budget, and when it is whole again (ms). makeRoom evicts by them.
	left, full, wholeAt int64
	state               any
}

// noAlgorithm is the algorithm of an entry whose state is not made yet:
// none that a call names.
const noAlgorithm Algorithm = 255

// alg is the algorithm e's state is kept for.
func (e *memoryEntry) alg() Algorithm {
	switch e.state.(type) {
	case *windowState:
		return SlidingWindow
	case *logState:
		return SlidingLog
	case *bucketState:
		return TokenBucket
	case *quotaState:
		return Quota
	case *slotsState:
		return slotsEntry
	}
	return noAlgorithm
}

// stateOf returns e's state of type S, made on first use.
func stateOf[S any](e *memoryEntry) *S {
	st, ok := e.state.(*S)
	if !ok {
		st = new(S)
		e.state = st
	}
	return st
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns a MemoryStore and starts its sweeper; Close stops it.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Second
	}
	s := &MemoryStore{
		now:  opts.Now,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*memoryEntry)
	}
	shards := opts.Shards
	if shards <= 0 || shards > memoryShards || shards&(shards-1) != 0 {
		shards = ShardsFor(opts.MaxKeys, memoryShards)
	}
	s.mask = uint64(shards - 1)
	s.evictions = &evictionsByRole[min(int(opts.Role), len(memoryRoles)-1)]
	s.SetMaxKeys(opts.MaxKeys)
	memoryStores.Store(s, struct{}{})
	go s.sweepLoop(opts.SweepInterval)
	return s
}

// Lease grants up to req.Want permits of req.Key. It never blocks on anything
// but the key's shard lock, so it ignores ctx except for a done check.
func (s *MemoryStore) Lease(ctx context.Context, req *LeaseRequest) (LeaseResult, error) {
	if err := checkLease(req); err != nil {
		return LeaseResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return LeaseResult{}, err
	}
	now := s.now().UnixMilli()
	sh := &s.shards[xxhash.Sum64(req.Key)&s.mask]
	sh.mu.Lock()
	e := sh.entry(req.Key, req.Kept, req.Params.Algorithm, now, int(s.perShard.Load()), s.evictions)
	if e == nil {
		sh.mu.Unlock()
		return noRoom(), nil
	}
	a := e.lease(now, req)
	e.keep(now, req, &a)
	e.expireAt = now + a.keepMS
	sh.soonest = min(sh.soonest, e.expireAt)
	sh.mu.Unlock()
	return a.resultFor(req), nil
}

// SetMaxKeys changes the bound on the number of keys: n rounded down to a
// multiple of the shard count, at least one key per shard (the shards are
// chosen at NewMemoryStore). A lower
// bound drops no key at once: a shard above it evicts one key for each new
// one (makeRoom).
func (s *MemoryStore) SetMaxKeys(n int) {
	s.perShard.Store(int64(max(1, n/int(s.mask+1))))
}

// Ping always succeeds.
func (s *MemoryStore) Ping(context.Context) error { return nil }

// Close stops the sweeper. The store keeps answering Lease.
func (s *MemoryStore) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		memoryStores.Delete(s)
	})
}

// Len returns the number of keys held.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// leaseQuery is a lease request in the algorithms' integer milliseconds.
type leaseQuery struct {
	limit, windowMS, want, need, leaseMS       int64
	ret, retRef, used, unleased, unleasedAgoMS int64
	useWithinMS                                int64
	idRetries, idWindowMS                      int64                   // the request ID allowance (sliding_log)
	before                                     [UnleasedParts][2]int64 // UnleasedBefore: permits, ms ago
	level, levelAgoMS                          int64                   // LeaseRequest.Level + 1 (0: not known), LevelAgo
}

func newLeaseQuery(req *LeaseRequest) leaseQuery {
	q := leaseQuery{
		limit: req.Params.Limit, windowMS: ceilMS(req.Params.Window), want: req.Want, need: req.need(),
		leaseMS: ceilMS(req.LeaseTTL), ret: req.Return, retRef: req.ReturnRef, used: req.Used, unleased: req.Unleased,
		unleasedAgoMS: int64(req.UnleasedAgo / time.Millisecond), useWithinMS: ceilMS(req.UseWithin),
		idRetries: req.RequestIDRetries, idWindowMS: ceilMS(req.RequestIDWindow),
	}
	q.level, q.levelAgoMS = req.levelArg(), int64(req.LevelAgo/time.Millisecond)
	for i, part := range req.UnleasedBefore {
		q.before[i] = [2]int64{part.N, int64(part.Ago / time.Millisecond)}
	}
	return q
}

func (e *memoryEntry) lease(now int64, req *LeaseRequest) leaseAnswer {
	q := newLeaseQuery(req)
	return e.leaseQuery(now, req, &q, req.RequestID)
}

// leaseQuery runs q on the entry's algorithm; requestID may be nil.
func (e *memoryEntry) leaseQuery(now int64, req *LeaseRequest, q *leaseQuery, requestID []byte) leaseAnswer {
	p := &req.Params
	switch p.Algorithm {
	case SlidingLog:
		return stateOf[logState](e).lease(now, q, requestID)
	case TokenBucket:
		return stateOf[bucketState](e).lease(now, p.Capacity, p.RefillRate, q)
	case Quota:
		return stateOf[quotaState](e).lease(now, p, q)
	default:
		return stateOf[windowState](e).lease(now, q, granularityMS(q.windowMS, q.leaseMS))
	}
}

// entry finds or makes the key's entry. An expired entry, or one kept for
// another algorithm (Redis keys differ by algorithm), starts afresh. It
// returns nil when the key is new and the full shard has no room for it
// (makeRoom). A new key's map key is kept when it holds key's bytes (see
// LeaseRequest.Kept), else a copy.
func (sh *memoryShard) entry(key []byte, kept string, alg Algorithm, now int64, limit int, ev *memoryEvictions) *memoryEntry {
	e := sh.m[string(key)]
	if e != nil && e.alg() == alg && e.expireAt > now {
		return e
	}
	if e == nil {
		if len(sh.m) >= limit && !sh.makeRoom(now, limit, ev) {
			return nil
		}
		e = &memoryEntry{}
		if kept != string(key) { // not the same bytes: a copy of its own
			kept = string(key)
		}
		sh.m[kept] = e
	}
	*e = memoryEntry{} // its state is made for alg by the caller (stateOf)
	return e
}

// dropExpired drops the shard's expired entries and returns how many. It
// scans only when soonest says some entry may have expired, so a flood of
// new keys into a shard of live keys costs one comparison per key.
func (sh *memoryShard) dropExpired(now int64) int {
	if now < sh.soonest {
		return 0
	}
	n := 0
	soonest := int64(math.MaxInt64)
	for k, e := range sh.m {
		if e.expireAt <= now {
			delete(sh.m, k)
			n++
			continue
		}
		soonest = min(soonest, e.expireAt)
	}
	sh.soonest = soonest
	return n
}

func (s *MemoryStore) sweepLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops every expired entry, one shard lock at a time.
func (s *MemoryStore) sweep() {
	now := s.now().UnixMilli()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.dropExpired(now)
		sh.mu.Unlock()
	}
}

// Counted calls f with each count of key's sliding_window or sliding_log
// state that still counts at now: the millisecond from which it stops
// counting once a window has passed (see counts) and its permits, oldest
// first. It calls f for nothing when the key is missing, expired or of
// another algorithm. f runs under the shard's lock: it must not call s.
func (s *MemoryStore) Counted(key []byte, alg Algorithm, window time.Duration, f func(atMS, n int64)) {
	now := s.now().UnixMilli()
	sh := &s.shards[xxhash.Sum64(key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[string(key)]
	if e == nil || e.alg() != alg || e.expireAt <= now {
		return
	}
	var c counts
	switch st := e.state.(type) {
	case *windowState:
		c = st.subs
	case *logState:
		c = st.runs
	}
	horizon := now - window.Milliseconds()
	for _, x := range c {
		if x.at > horizon {
			f(x.at, x.n)
		}
	}
}
