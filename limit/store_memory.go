package limit

import (
	"context"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// memoryShards is the number of independently locked parts of a MemoryStore.
const memoryShards = 256

// MemoryOptions configure a MemoryStore. The zero value is usable.
type MemoryOptions struct {
	// MaxKeys bounds the number of keys kept; when a shard is full, the key
	// closest to expiry among a few sampled ones is evicted. Default 1<<20.
	MaxKeys int
	// Now returns the current time. Default time.Now; tests inject a clock.
	Now func() time.Time
	// SweepInterval is how often expired keys are dropped in the background.
	// Default 1s.
	SweepInterval time.Duration
}

// MemoryStore is the in-process Store: the same algorithms and lease
// accounting as the Redis scripts, for a single instance. Keys are spread
// over 256 shards by xxhash, each with its own mutex, so there is no global
// lock; expired keys are swept in the background and memory is bounded by
// MaxKeys.
type MemoryStore struct {
	now      func() time.Time
	perShard int
	shards   [memoryShards]memoryShard
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

type memoryShard struct {
	// mu protects m. Do not use sync.RWMutex: every Lease writes.
	mu sync.Mutex
	m  map[string]*memoryEntry
}

// memoryEntry is one key's state; only the part of its algorithm is used.
type memoryEntry struct {
	alg      Algorithm
	expireAt int64 // ms, like the Redis key's TTL
	window   windowState
	log      logState
	bucket   bucketState
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
		now:      opts.Now,
		perShard: max(1, (opts.MaxKeys+memoryShards-1)/memoryShards),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*memoryEntry)
	}
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
	sh := &s.shards[xxhash.Sum64(req.Key)%memoryShards]
	sh.mu.Lock()
	e := sh.entry(req.Key, req.Params.Algorithm, now, s.perShard)
	a := e.lease(now, req)
	e.expireAt = now + a.keepMS
	sh.mu.Unlock()
	return a.result(), nil
}

// Ping always succeeds.
func (s *MemoryStore) Ping(context.Context) error { return nil }

// Close stops the sweeper. The store keeps answering Lease.
func (s *MemoryStore) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
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
	limit, windowMS, want, need, leaseMS int64
	ret, retRef, used, spent, spentAgoMS int64
	useWithinMS                          int64
	idRetries, idWindowMS                int64 // the request ID allowance (sliding_log)
}

func newLeaseQuery(req *LeaseRequest) leaseQuery {
	return leaseQuery{
		limit: req.Params.Limit, windowMS: ceilMS(req.Params.Window), want: req.Want, need: req.need(),
		leaseMS: ceilMS(req.LeaseTTL), ret: req.Return, retRef: req.ReturnRef, used: req.Used, spent: req.Spent,
		spentAgoMS: int64(req.SpentAgo / time.Millisecond), useWithinMS: ceilMS(req.UseWithin),
		idRetries: req.RequestIDRetries, idWindowMS: ceilMS(req.RequestIDWindow),
	}
}

func (e *memoryEntry) lease(now int64, req *LeaseRequest) leaseAnswer {
	p := &req.Params
	q := newLeaseQuery(req)
	switch p.Algorithm {
	case SlidingLog:
		return e.log.lease(now, &q, req.RequestID)
	case TokenBucket:
		return e.bucket.lease(now, p.Capacity, p.RefillRate, &q)
	default:
		return e.window.lease(now, &q, granularityMS(q.windowMS, q.leaseMS))
	}
}

// entry finds or makes the key's entry. An expired entry, or one kept for
// another algorithm (Redis keys differ by algorithm), starts afresh.
func (sh *memoryShard) entry(key []byte, alg Algorithm, now int64, limit int) *memoryEntry {
	e := sh.m[string(key)]
	if e != nil && e.alg == alg && e.expireAt > now {
		return e
	}
	if e == nil {
		if len(sh.m) >= limit {
			sh.evict(now)
		}
		e = &memoryEntry{}
		sh.m[string(key)] = e
	}
	*e = memoryEntry{alg: alg}
	return e
}

// evict makes room for one key: it drops the expired entries among a few
// (randomly ordered) map entries, or else the one closest to expiry.
// Evicting a live key forgets its counts; MaxKeys is sized so that this only
// happens under a flood of distinct keys.
func (sh *memoryShard) evict(now int64) {
	const sample = 8
	var victim string
	victimAt, seen := int64(0), 0
	for k, e := range sh.m {
		if e.expireAt <= now {
			delete(sh.m, k)
			return
		}
		if seen == 0 || e.expireAt < victimAt {
			victim, victimAt = k, e.expireAt
		}
		if seen++; seen == sample {
			break
		}
	}
	delete(sh.m, victim)
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
		for k, e := range sh.m {
			if e.expireAt <= now {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}
