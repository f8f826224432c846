package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// The local share (Limiter.fallback, see useLocally) counts every permit the
// store grants this pod, so that the pod keeps to its share of each key
// should the store fail. Most keys of a large population take one lease in a
// window: for them the share's count is that lease alone, which the key's
// bucket holds already (its size, expiry and unused permits). So the share's
// count of a bucket's current lease of a sliding limit stays in the bucket
// (shareKind, localRef) instead of an entry of the share's table of its own
// (about 150 bytes a key with its state), and moves into the table (spills)
// before anything reads or changes the key's count there, when the key's
// next lease is counted, and when the bucket leaves the table.

// spilledShares counts the share counts that moved from a bucket into the
// local share's table (see kept.spillShare).
var spilledShares = metrics.NewCounter(`sentinel_limit_local_share_spilled_total`)

// shareKind is what the local share's table needs to count a key's permits
// beside the key: a sliding algorithm and its window (the share's limit is
// the table's concern only when it decides).
type shareKind struct {
	alg    store.Algorithm
	window time.Duration
}

// shareKinds numbers the share kinds of the limits in use, from 1, for a
// bucket to name its own in a byte. A limiter's kinds are few (one for each
// window its limits have); past 255 a lease's share is counted in the table
// as before. Read without a lock: every lease call of a key held in its
// bucket looks its kind up.
type shareKinds struct {
	mu    sync.Mutex                  // serializes the writers
	kinds atomic.Pointer[[]shareKind] // only ever appended to
}

// number returns k's number, numbering it when new (0: no number left).
func (ks *shareKinds) number(k shareKind) uint8 {
	if n := ks.find(k); n != 0 {
		return n
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if n := ks.find(k); n != 0 {
		return n
	}
	var kinds []shareKind
	if p := ks.kinds.Load(); p != nil {
		kinds = *p
	}
	if len(kinds) == 255 {
		return 0
	}
	kinds = append(kinds[:len(kinds):len(kinds)], k) // a new array: readers keep theirs
	ks.kinds.Store(&kinds)
	return uint8(len(kinds))
}

// find returns k's number (0: none yet).
func (ks *shareKinds) find(k shareKind) uint8 {
	if p := ks.kinds.Load(); p != nil {
		for i, have := range *p {
			if have == k {
				return uint8(i + 1)
			}
		}
	}
	return 0
}

// kind returns the share kind numbered n (1..).
func (ks *shareKinds) kind(n uint8) shareKind {
	return (*ks.kinds.Load())[n-1]
}

// holdShare counts the n permits of b's new lease for the local share in b
// itself, when b can hold them: it is in the table, holds no such count
// already, and the limit is a sliding one (a token bucket's or a quota's
// share counts differently). It reports whether it did. The caller holds
// b.mu.
func (l *Limiter) holdShare(s *spec, b *bucket, n int64) bool {
	alg := s.params.Algorithm
	if b == nil || b.unkept || b.shareKind != 0 || (alg != store.SlidingWindow && alg != store.SlidingLog) {
		return false
	}
	k := l.kept.shareKinds.number(shareKind{alg: alg, window: s.params.Window})
	if k == 0 {
		return false
	}
	b.shareKind, b.localRef = k, n
	return true
}

// spillShare moves the share count b holds (holdShare) into the local
// share's table, as the table would count those permits by now: the unused
// ones (leased, or expired and not returned) as a lease until the lease's
// expiry, whose return goes where the table counted them (localRef); the
// used ones from the time of the last of them, or the lease's expiry if
// earlier, plus slack (the time a decided request may take to be used,
// Limiter.shareSlack). Every permit then counts for a window from a time no
// earlier than its use, so the pod's share holds all of them wherever it is
// read; a used one counts no longer than the lease's expiry plus slack and
// the window. The caller holds b.mu.
func (k *kept) spillShare(b *bucket, now int64, slack time.Duration) {
	if b.shareKind == 0 {
		return
	}
	kind, n := k.shareKinds.kind(b.shareKind), b.localRef
	b.shareKind, b.localRef = 0, 0
	held := min(b.permits+b.expired, n)
	used := n - held
	// lastUsed is kept to the millisecond (bucketTable.lookup).
	at := min(now, min(b.lastUsed.Load()+int64(time.Millisecond), b.expires)+int64(slack))
	if now-at >= int64(kind.window) {
		used = 0 // they left the window
	}
	if held == 0 && used <= 0 {
		return // nothing that counts still
	}
	req := &store.LeaseRequest{Key: []byte(b.key), Kept: b.key,
		Params: store.Params{Algorithm: kind.alg, Window: kind.window, Limit: store.MaxLimit}}
	if used > 0 {
		req.Unleased, req.UnleasedAgo = used, time.Duration(now-at)
	}
	if held > 0 {
		ttl := time.Duration(max(b.expires-now, 0))
		req.Want, req.Need, req.LeaseTTL, req.UseWithin = held, 1, ttl, ttl
	}
	res, err := k.fallback.Lease(context.Background(), req)
	if err == nil && held > 0 && res.Granted > 0 {
		b.localRef = res.Ref
	}
	spilledShares.Inc()
}

// shareOf returns the local share's table for reading or changing s's
// key's count there, with the count that the key's bucket holds moved into
// it first (kept.spillShare): every such read goes through here. b is the
// bucket the caller holds (b.mu), or nil when it holds none, and then the
// table's bucket for the key, if any, is looked up; now is the time.
func (l *Limiter) shareOf(s *spec, b *bucket, now int64) *store.MemoryStore {
	if !l.shared || l.policy != FailLocal {
		return l.fallback
	}
	if b == nil || b.unkept {
		kb := l.table.find(s.key(), false)
		if kb == nil || kb == b {
			return l.fallback
		}
		kb.mu.Lock()
		defer kb.mu.Unlock()
		b = kb
	}
	l.kept.spillShare(b, now, l.shareSlack())
	return l.fallback
}
