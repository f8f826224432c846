package limit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cespare/xxhash/v2"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// bucketShards is the number of independently locked parts of the local
// bucket table.
const bucketShards = 64

// bucket holds the permits one pod leased from the store for one key, and
// what the store last said about the key. Its mutex is per key: requests for
// different keys never contend.
//
// The fields a decision from the lease reads and writes (decideLocally) come
// first, with the mutex, within one cache line, and a bucket is three whole
// lines (so that its allocation starts one): a hot key's bucket moves
// between the cores that serve it, one line per decision rather than three
// (TestBucketHotFieldsShareALine). What only some keys use is kept apart
// (rate, rare, alone), so that a key called once or twice takes no more.
type bucket struct {
	mu      sync.Mutex
	permits int64 // leased, unused permits
	expires int64 // unix nanos after which permits are dropped
	// uses counts the tokens taken since the last lease call, its own
	// included: the key's rate on the pod (learnRate).
	uses int64
	// remaining is the store's remaining budget after the last lease;
	// resetAt when the budget is whole again (unix nanos: its last counted
	// permit leaves).
	remaining int64
	resetAt   int64
	// gen changes with every lease, so that a return never puts permits of
	// an earlier lease into a later one.
	gen uint32
	// late counts this bucket's store calls whose caller gave up and whose
	// answer has not come yet (their leases are still counted in the store).
	late atomic.Int32
	// freeIn is when the first permit counted in the store's last answer
	// leaves, in milliseconds after answeredAt, rounded up (freeNever: never;
	// freeAtReset: with the last, at resetAt). See freeAt.
	freeIn uint32
	// slight tells that the store's last answer left the key's count at
	// most a thousandth of its limit (Limiter.slight): the sweep may drop the
	// bucket once it is idle for a second.
	slight bool
	// shareKind, when not 0, tells that the local share's count of the
	// current lease is held here rather than in the share's table: localRef
	// permits, of the share kind (algorithm and window) numbered shareKind
	// (see shareKinds and kept.spillShare).
	shareKind uint8
	// unkept tells that the bucket is not in the table: it was made when
	// the table was full, or dropped from it since. It holds no share count.
	unkept bool

	key string
	// The current lease: where the store counted it (ref), how many
	// permits it granted (at most that many return; until when a return is
	// worth sending: returnBy).
	ref      int64
	localRef int64 // where the local share counted it (see Limiter.useLocally), or with shareKind its count
	leased   int64
	expired  int64 // permits of the lease that expired unused, not yet returned
	fill     *fill // the store call in flight for this key, or nil
	leasedAt int64 // unix nanos when the last lease call was sent

	// rate is what sizes the key's leases once it was called twice (nil
	// before: see leaseSize); rare is what only some keys use (nil until
	// the first use); alone is what the key's store failures left (nil
	// until the first: most keys never have any).
	rate  *leaseRate
	rare  *bucketRare
	alone *aloneState
	// The last store answer for the key: when it came (unix nanos, 0:
	// none yet; remaining is its budget).
	answeredAt int64
	// seq is the highest call number of the key the store answered
	// (seqAt: when that answer came, unix nanos), and ownUntil when the last
	// permit the store granted this pod for it stops counting: a call sent
	// later that gets a number no greater, before then, talks to a store
	// that lost writes (see Limiter.checkSeq).
	seq, seqAt, ownUntil int64

	lastUsed atomic.Int64 // unix nanos
}

// leaseRate sizes a key's leases from its own traffic on the pod (see
// Limiter.leaseSize): size is the lease size that fits it (it doubles
// while leases run out before they expire and halves when permits expire
// unused: wasted), gap a moving average of the time between two uses
// (nanos) over gaps samples (at most rateSamples counted), and demand the
// tokens wanted by requests that waited for a fill.
type leaseRate struct {
	size, gap, demand int64
	gaps              uint8
	wasted            bool
}

// rateState returns b.rate, made on first use: at the size a key's lease
// calls so far left (none: 0; one or more without a rate: 1). The caller
// holds b.mu.
func (b *bucket) rateState() *leaseRate {
	if b.rate == nil {
		b.rate = new(leaseRate)
		if b.leasedAt > 0 {
			b.rate.size = 1
		}
	}
	return b.rate
}

// freeIn's values that are not a time.
const (
	freeNever   = math.MaxUint32     // the bucket never refills
	freeAtReset = math.MaxUint32 - 1 // further than freeIn holds: with the last permit
)

// setFree records that the first permit counted in an answer that came at
// b.answeredAt leaves in d (d < 0: never). Rounded up to a millisecond:
// later, never earlier, so that the local share counts no permit freed that
// is not. The caller holds b.mu.
func (b *bucket) setFree(d time.Duration) {
	switch ms := (d + time.Millisecond - 1) / time.Millisecond; {
	case d < 0:
		b.freeIn = freeNever
	case ms >= freeAtReset:
		b.freeIn = freeAtReset
	default:
		b.freeIn = uint32(ms)
	}
}

// freeAt is when the first permit counted in the store's last answer
// leaves (unix nanos; math.MaxInt64: never). The caller holds b.mu.
func (b *bucket) freeAt() int64 {
	switch b.freeIn {
	case freeNever:
		return math.MaxInt64
	case freeAtReset:
		return b.resetAt
	}
	return b.answeredAt + int64(b.freeIn)*int64(time.Millisecond)
}

// returnBy is until when a return of b's lease is worth sending (unix
// nanos): about half a window after its permits expire, when it no longer
// counts; a token bucket's, always (a token taken counts until it refills);
// a quota's, until its period ends (later the store drops it). The caller
// holds b.mu.
func (b *bucket) returnBy(p *store.Params) int64 {
	switch p.Algorithm {
	case store.TokenBucket:
		return math.MaxInt64
	case store.Quota:
		return b.resetAt
	}
	return b.expires + int64(p.Window)/2
}

// bucketRare is what a bucket holds for only some keys: a refused one, one
// of a cost limit, of a concurrency limit, or of a request a later limit
// refused.
type bucketRare struct {
	// deniedUntil caches the store's refusal: until then the key is
	// refused locally without a store call (a flood over the limit does
	// not reach the store once per request). deniedAt is when it came
	// (unix nanos), deniedNeed its tokens (it holds for as many or more),
	// retryAfter its retry-after (nanos; -1: never); see
	// bucket.cacheRefusal.
	deniedUntil, deniedAt, deniedNeed, retryAfter int64
	// reserved are permits of the current lease that reservations hold
	// (see Reservation): its end does not report them used.
	reserved int64
	// slots: what the pod holds of a concurrency limit's key (nil for
	// the other limits; see Limiter.takeSlot).
	slots *slotState
	// owed: permits the store counted for requests a later limit
	// refused (nil until the first; see bucket.owe). Apart, so that a
	// bucketRare is one cache line.
	owed *owedPermits
}

// owedPermits are n permits the store counted at ref (a lease call's
// UsedRef) for requests a later limit refused: the key's next lease call
// returns them, until by (unix nanos; later they no longer count). See
// Limiter.settleOwed.
type owedPermits struct {
	n, ref, by int64
}

// forgetRefusal drops b's cached refusal: the next request for the key
// is decided anew. The caller holds b.mu.
func (b *bucket) forgetRefusal() {
	if b.rare != nil {
		b.rare.deniedUntil = 0
	}
}

// deniedAt is when the store's refusal that b caches came (unix nanos; 0:
// none). The caller holds b.mu.
func (b *bucket) deniedAt() int64 {
	if b.rare == nil {
		return 0
	}
	return b.rare.deniedAt
}

// owes tells that b holds owed permits (see owe). The caller holds b.mu.
func (b *bucket) owes() bool { return b.rare != nil && b.rare.owed != nil && b.rare.owed.n > 0 }

// rareState returns b.rare, made on first use. The caller holds b.mu.
func (b *bucket) rareState() *bucketRare {
	if b.rare == nil {
		b.rare = new(bucketRare)
	}
	return b.rare
}

// aloneState is what a key's store failures left in its bucket.
type aloneState struct {
	unleasedLog
	// fallbackUsed is the permits the local policy let through since the key's
	// last store answer (fallbackRoom).
	fallbackUsed int64
	failedAt     int64 // unix nanos of the last store call for the key that failed
	// failingSince is when the key's store calls began to fail (unix nanos:
	// the first failure after an answer); see Limiter.heldShare.
	failingSince int64
	// emptiedAt is when an answer last showed that the store lost the
	// key's counts (unix nanos; see Limiter.drains).
	emptiedAt int64
	// unleasedAt is when the last permit was let through alone (unix
	// nanos), and unleasedUntil when the last of them stops counting in
	// any window to come (math.MaxInt64: never, a token bucket that does
	// not refill): until then the sweep keeps the bucket.
	unleasedAt, unleasedUntil int64
	// refusedAt is when the local policy last refused a request for the
	// key (unix nanos): its clients asked this pod for more than its share
	// while it decided alone. See Limiter.refusedAlone.
	refusedAt int64
}

// aloneState returns b.alone, made on first use. The caller holds b.mu.
func (b *bucket) aloneState() *aloneState {
	if b.alone == nil {
		b.alone = new(aloneState)
	}
	return b.alone
}

// failedAt, failingSince and emptiedAt read b.alone's (0: none). The
// caller holds b.mu.
func (b *bucket) failedAt() int64 {
	if b.alone == nil {
		return 0
	}
	return b.alone.failedAt
}

func (b *bucket) failingSince() int64 {
	if b.alone == nil {
		return 0
	}
	return b.alone.failingSince
}

// fallbackUsed reads b.alone's (0: none).
func (b *bucket) fallbackUsed() int64 {
	if b.alone == nil {
		return 0
	}
	return b.alone.fallbackUsed
}

func (b *bucket) emptiedAt() int64 {
	if b.alone == nil {
		return 0
	}
	return b.alone.emptiedAt
}

// unleasedLog counts the permits the local failure policy let through on
// one key, by slots of an eighth of a window (width): n[slot%unleasedSlots]
// is the newest, the others the eight before it, and last the time of
// each slot's last permit (unix nanos); they go to the store with those
// times (LeaseRequest.Unleased and UnleasedBefore). width is as the
// limit's window was when they were filled (nanos; 0: one slot): a rule or
// a reload may change it under the same key (see bucket.addUnleased).
type unleasedLog struct {
	n     [unleasedSlots]int64
	last  [unleasedSlots]int64
	slot  int64 // unix nanos / width of the newest slot
	width int64
}

// fill is one in-flight lease call; requests that find the bucket empty while
// it runs wait for it instead of calling the store themselves.
type fill struct {
	done chan struct{}
}

// unkeptBuckets counts the keys decided with a bucket the full table did
// not keep.
var unkeptBuckets = metrics.NewCounter(`sentinel_limit_local_buckets_unkept_total`)

// sweptSlight counts the slight buckets the sweep dropped before they were
// idle for the usual time (see bucketTable.sweep).
var sweptSlight = metrics.NewCounter(`sentinel_limit_local_buckets_swept_slight_total`)

// sweptIdle counts the buckets the sweep dropped, with the in-process
// store, once unused for a second (see bucketTable.sweep).
var sweptIdle = metrics.NewCounter(`sentinel_limit_local_buckets_swept_idle_total`)

// bucketTable maps keys to buckets, in shards whose maps are read without
// a lock and without allocating. (A read lock would write a word that every
// core's requests for a hot key share, once to take it and once to drop it.)
type bucketTable struct {
	perShard atomic.Int64 // limits.max_keys ÷ the shards in use, at least 1
	mask     uint64       // the shards in use, less one: as many as hold 16 buckets (store.ShardsFor)
	shards   [bucketShards]bucketShard
	count    atomic.Int64
	// spill moves the share count a bucket holds into the local share's
	// table (kept.spillShare) before the bucket leaves the table (nil:
	// none to move). The caller holds b.mu.
	spill func(b *bucket, now int64)
}

type bucketShard struct {
	mu sync.Mutex                  // serializes the writers of m and n
	m  *xsync.Map[string, *bucket] // read without a lock or an allocation
	n  int                         // buckets in m
}

func newBucketTable(maxKeys int) *bucketTable {
	t := &bucketTable{mask: uint64(store.ShardsFor(maxKeys, bucketShards) - 1)}
	for i := range t.shards {
		t.shards[i].m = xsync.NewMap[string, *bucket]()
	}
	t.setMaxKeys(maxKeys)
	return t
}

// setMaxKeys bounds the table at about maxKeys buckets: a smaller bound
// takes no new buckets until there is room, it drops none. (The shards are
// chosen when the table is made.)
func (t *bucketTable) setMaxKeys(maxKeys int) {
	t.perShard.Store(int64(max(1, maxKeys/int(t.mask+1))))
}

// each calls f with every bucket of the table.
func (t *bucketTable) each(f func(b *bucket)) {
	for i := range t.shards {
		t.shards[i].m.Range(func(_ string, b *bucket) bool {
			f(b)
			return true
		})
	}
}

// find returns key's bucket (nil: none); remove takes it out of the table.
func (t *bucketTable) find(key []byte, remove bool) *bucket {
	sh := &t.shards[xxhash.Sum64(key)&t.mask]
	k := unsafe.String(unsafe.SliceData(key), len(key)) // for these calls only: no copy
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m.Load(k)
	if !ok {
		return nil
	}
	if remove {
		sh.m.Delete(k)
		sh.n--
		t.count.Add(-1)
	}
	return b
}

// lookup returns the bucket of key, used at now; nil when there is none.
func (t *bucketTable) lookup(key []byte, now int64) *bucket {
	sh := &t.shards[xxhash.Sum64(key)&t.mask]
	b, ok := sh.m.Load(unsafe.String(unsafe.SliceData(key), len(key))) // no copy
	if !ok {
		return nil
	}
	// Idle means unused for 10 s or more: a hot key's bucket need not
	// write its shared cache line on every request.
	if now-b.lastUsed.Load() > int64(time.Millisecond) {
		b.lastUsed.Store(now)
	}
	return b
}

// get returns the bucket of key, creating it when missing. It allocates only
// to create one.
func (t *bucketTable) get(key []byte, now int64) *bucket {
	if b := t.lookup(key, now); b != nil {
		return b
	}
	sh := &t.shards[xxhash.Sum64(key)&t.mask]
	k := unsafe.String(unsafe.SliceData(key), len(key)) // for the lookups only: no copy
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b, ok := sh.m.Load(k); ok {
		return b
	}
	if int64(sh.n) >= t.perShard.Load() && !t.makeRoom(sh, now) {
		// Full of buckets that hold state: this key is decided with a
		// bucket that is not kept. A new bucket leases only what its
		// request needs, so it wastes nothing; the key only loses the
		// local fast path until there is room.
		unkeptBuckets.Inc()
		b := &bucket{key: string(key), remaining: -1, unkept: true}
		b.lastUsed.Store(now)
		return b
	}
	b := &bucket{key: string(key), remaining: -1}
	b.lastUsed.Store(now)
	sh.m.Store(b.key, b)
	sh.n++
	t.count.Add(1)
	return b
}

// inUse is how recently a bucket was used for makeRoom to keep it.
const inUse = time.Second

// makeRoom drops up to four buckets that hold nothing among the first few
// the shard's map ranges over and reports whether it dropped any. A bucket
// holds something when it has a store call in flight or given up on
// (fill, late), permits the local failure policy let through and not yet
// reported to the store (alone), leased permits not yet used or returned
// (permits, expired), or the store's answer that the key's budget is spent
// until resetAt: dropping the first would let a limit be exceeded, the
// second would keep budget counted in the store that nobody can use, and
// the third would let an exhausted key through on the pod's local share
// should the store fail (a flood of new keys would free the clients that
// used up their limit). Nor does it drop a bucket used within the last
// second (inUse), whatever it holds: a key in use would lose, besides its
// lease, the store's last answer and call number, and come back decided
// with a bucket the table cannot keep while new keys fill it (a key flood),
// whose local admissions no later call reports. The caller holds sh.mu;
// now is the time.
func (t *bucketTable) makeRoom(sh *bucketShard, now int64) bool {
	const sample, most = 32, 4
	seen, dropped := 0, 0
	sh.m.Range(func(k string, b *bucket) bool {
		if seen++; seen > sample || dropped == most {
			return false
		}
		if now-b.lastUsed.Load() >= int64(inUse) && b.holdsNothing(now) {
			t.drop(sh, k, b, now)
			dropped++
		}
		return true
	})
	return dropped > 0
}

// holdsNothing reports whether b can be dropped without losing anything
// but its cached answers (see makeRoom); the share count it may hold goes
// to the share's table (drop). When it can, it returns with b.mu held, for
// the caller to drop b and unlock it. It does not wait for b.mu: a bucket in
// use is not dropped.
func (b *bucket) holdsNothing(now int64) bool {
	if b.late.Load() > 0 || !b.mu.TryLock() {
		return false
	}
	spent := b.answeredAt > 0 && b.remaining <= 0 && now < b.resetAt
	if b.fill == nil && !b.hasUnleased() && b.permits == 0 && b.expired == 0 && !b.owes() && !spent {
		return true
	}
	b.mu.Unlock()
	return false
}

// drop takes b, whose mutex the caller holds with sh.mu, out of the table
// under key k, its share count (if it holds one) into the share's table,
// and unlocks b.
func (t *bucketTable) drop(sh *bucketShard, k string, b *bucket, now int64) {
	if b.shareKind != 0 && t.spill != nil {
		t.spill(b, now)
	}
	b.unkept = true
	b.mu.Unlock()
	sh.m.Delete(k)
	sh.n--
	t.count.Add(-1)
}

// owe keeps n permits that the store counted at ref for a request another
// limit refused, until (unix nanos) they stop counting, for b's next lease
// call to return (see Limiter.settleOwed). It reports whether it kept them:
// a bucket owes permits of one ref at a time.
func (b *bucket) owe(n, ref, until int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.rareState()
	if r.owed == nil {
		r.owed = new(owedPermits)
	}
	o := r.owed
	if o.n > 0 && o.ref != ref {
		return false
	}
	o.n, o.ref, o.by = o.n+n, ref, until
	return true
}

// sweep drops buckets unused since before idleBefore that have no call in
// flight and no unleased permits that still count (see
// bucket.unleasedUntil; now is the time). An idle bound of two windows of the
// limits section does not cover the latter: a rule's window (or a token
// bucket's refill time, or a quota's period) can be longer, and permits let
// through alone while the store failed then still count in windows to come
// when the bucket goes idle; dropped unreported, they would be forgotten and
// the store would grant the window's whole budget on top of them. Such
// buckets stay until the key's next store call reports them or they leave
// the window; the table stays bounded by max_keys, since a full shard does
// not take new buckets (get). Leased permits not yet used or returned are
// dropped with the bucket: the store keeps counting them, so that loses
// budget, never overshoots.
//
// A slight bucket (see bucket.slight) goes sooner, once unused for a second
// (inUse), when it holds nothing but its lease and the store's last answer:
// no call in flight or given up on, no store failure of the key (alone) and
// nothing rare (a cached refusal, reservations, slots, owed permits). What
// that forgets is bounded by the key's count, which the answer put at a
// thousandth of its limit at most: the lease's unused permits, which the
// store counts on (budget lost, never overshoot), and the call number that
// would notice a store that lost the key's writes (a store that forgets a
// slight count grants at most that thousandth again). Most keys of a large
// population are slight: one or two requests each, for a limit far above.
//
// With the in-process store (inProcess), any bucket goes once unused for a
// second when it holds nothing but the store's last answer: no permits
// (leased, or expired and not yet returned), no call in flight or given up
// on, nothing rare. The store keeps the key's count, never fails and
// answers without a round trip, so such a bucket only caches what the
// key's next call asks it again: a key called less than once a second costs
// the pod its count alone.
func (t *bucketTable) sweep(now, idleBefore int64, inProcess bool) {
	slightBefore := now - int64(inUse)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.m.Range(func(k string, b *bucket) bool {
			used := b.lastUsed.Load()
			if used < max(idleBefore, slightBefore) && b.mu.TryLock() {
				bare := b.alone == nil && b.rare == nil && b.late.Load() == 0
				drop := b.fill == nil && (used < idleBefore && (!b.hasUnleased() || now >= b.alone.unleasedUntil) ||
					b.slight && bare || inProcess && bare && b.permits == 0 && b.expired == 0)
				if !drop {
					b.mu.Unlock()
					return true
				}
				slight := b.slight
				t.drop(sh, k, b, now)
				switch {
				case used < idleBefore:
				case slight:
					sweptSlight.Inc()
				default:
					sweptIdle.Inc()
				}
			}
			return true
		})
		sh.mu.Unlock()
	}
}

// len is the number of buckets.
func (t *bucketTable) len() int { return int(t.count.Load()) }

// retryFrom is the retry-after of the cached refusal, seen at now.
func (b *bucket) retryFrom(now int64) time.Duration {
	var retry int64
	if b.rare != nil {
		retry = b.rare.retryAfter
	}
	if retry < 0 {
		return -1
	}
	return time.Duration(max(retry-(now-b.rare.deniedAt), int64(time.Millisecond)))
}
