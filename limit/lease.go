package limit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// bucketShards is the number of independently locked parts of the local
// bucket table.
const bucketShards = 64

// bucket holds the permits one pod leased from the store for one key, and
// what the store last said about the key. Its mutex is per key: requests for
// different keys never contend.
type bucket struct {
	key string

	mu      sync.Mutex
	permits int64 // leased, unused permits
	expires int64 // unix nanos after which permits are dropped
	// The current lease: where the store counted it (ref), how many
	// permits it granted (at most that many go back), until when a return
	// is worth sending (unix nanos; after it the lease no longer counts),
	// and a generation that changes with every lease, so that a refund
	// never puts permits of an earlier lease into a later one.
	ref      int64
	localRef int64 // where the local share counted it (see Limiter.spendLocally)
	leased   int64
	expired  int64 // permits of the lease that expired unused, not yet given back
	returnBy int64
	gen      uint64
	// deniedUntil caches the store's refusal: until then the key is refused
	// locally without a store call (a flood over the limit does not reach
	// the store once per request).
	deniedUntil int64
	deniedNeed  int64 // tokens of the cached refusal: it holds for as many or more
	deniedAt    int64 // unix nanos of the cached refusal
	retryAfter  int64 // nanos, of the cached refusal (-1: never)
	remaining   int64 // the store's remaining budget after the last lease
	resetAt     int64 // unix nanos when the budget is whole again
	fill        *fill // the store call in flight for this key, or nil
	// size is the lease size that fits this pod's traffic on the key: it
	// doubles while leases run out before they expire and halves when
	// permits expire unused (wasted budget).
	size     int64
	wasted   bool  // permits expired unused since the last lease
	leasedAt int64 // unix nanos when the last lease call was sent
	demand   int64 // tokens wanted by requests that waited for a fill
	// spent counts the permits the local failure policy let through on this
	// key since the last lease call that reached the store.
	spent   int64
	spentAt int64 // unix nanos: when the last of them was let through

	lastUsed atomic.Int64 // unix nanos
	// late counts this bucket's store calls whose caller gave up and whose
	// answer has not come yet (their leases are still counted in the store).
	late atomic.Int32
}

// fill is one in-flight lease call; requests that find the bucket empty while
// it runs wait for it instead of calling the store themselves.
type fill struct {
	done chan struct{}
}

// bucketTable maps keys to buckets: sharded maps behind RWMutexes, read
// without allocating.
type bucketTable struct {
	perShard int
	shards   [bucketShards]bucketShard
	count    atomic.Int64
}

type bucketShard struct {
	mu sync.RWMutex
	m  map[string]*bucket
}

func newBucketTable(maxKeys int) *bucketTable {
	t := &bucketTable{perShard: max(1, (maxKeys+bucketShards-1)/bucketShards)}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*bucket)
	}
	return t
}

// get returns the bucket of key, creating it when missing. It allocates only
// to create one.
func (t *bucketTable) get(key []byte, now int64) *bucket {
	sh := &t.shards[xxhash.Sum64(key)%bucketShards]
	sh.mu.RLock()
	b := sh.m[string(key)]
	sh.mu.RUnlock()
	if b != nil {
		// Idle means unused for 10 s or more: a hot key's bucket need not
		// write its shared cache line on every request.
		if now-b.lastUsed.Load() > int64(time.Millisecond) {
			b.lastUsed.Store(now)
		}
		return b
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b = sh.m[string(key)]; b != nil {
		return b
	}
	if len(sh.m) >= t.perShard {
		// Full: drop a few entries (map order is random). Their unused
		// permits are lost, which can only under-use a limit.
		n := 0
		for k := range sh.m {
			delete(sh.m, k)
			t.count.Add(-1)
			if n++; n == 4 {
				break
			}
		}
	}
	b = &bucket{key: string(key), remaining: -1}
	b.lastUsed.Store(now)
	sh.m[b.key] = b
	t.count.Add(1)
	return b
}

// sweep drops buckets unused since before idleBefore that have no call in
// flight.
func (t *bucketTable) sweep(idleBefore int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, b := range sh.m {
			if b.lastUsed.Load() < idleBefore && b.mu.TryLock() {
				if b.fill == nil {
					delete(sh.m, k)
					t.count.Add(-1)
				}
				b.mu.Unlock()
			}
		}
		sh.mu.Unlock()
	}
}

// len is the number of buckets.
func (t *bucketTable) len() int { return int(t.count.Load()) }
