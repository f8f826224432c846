package limit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cespare/xxhash/v2"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// First uses. Most keys of a large population (client addresses, users)
// send a few requests in a window, far under a limit of thousands: with a
// store call each, the store pays for every request of the population, and
// the pod keeps a bucket for each. So the store keeps a few permits of
// every key reserved for each pod: it grants the limit less them, and each
// pod lets a key's first requests of a window through on the permits
// reserved for it, without a store call and without a bucket. It counts
// the keys' uses of them for a window (firstUses); a key's next request in
// that window goes to the store, as before.
//
// In any window, the store's grants (the limit less the pods' permits) and
// the pods' first uses (their own permits at most) add up to the limit:
// the bound is exact. Only a limit of a window (sliding_window or
// sliding_log) of at least a thousand a pod reserves (Limiter.reserved),
// a thousandth of it a pod and firstUseMost at most: the store's limit is
// lower by a thousandth at most. While the pods seen change, a limit can
// be exceeded by the first uses of the pods not yet counted: a thousandth
// of it at most, as the limit of one whose reservation stops (fewer than a
// thousand a pod) still had them in its window.

// firstUseGrants counts the decisions made on a pod's reserved permits.
var firstUseGrants = metrics.NewCounter(`sentinel_limit_first_use_grants_total`)

// firstUseSeen counts the decisions of keys that had no bucket, could have
// been a first use, but had used their pod's permits in the window already
// (or the filter counted them so), and went to the store.
var firstUseSeen = metrics.NewCounter(`sentinel_limit_first_use_seen_total`)

// firstUseMost caps the permits the store keeps of a key for each pod: the
// most a useFilter counts.
const firstUseMost = 15

// reserveEach is how many permits of s's limit the store keeps for each
// of pods pods' first uses: a thousandth of the limit a pod (firstUseMost
// at most) when they are on (limits.first_uses), the store is another
// process's, and s is a window's limit of at least slightPart a pod; else
// 0.
func (l *Limiter) reserveEach(s *spec, pods int64) int64 {
	if !l.reserves(s) {
		return 0
	}
	return min(s.params.Limit/(slightPart*pods), firstUseMost)
}

// reserved is how many permits of s's limit the store keeps for the first
// uses of pods pods (see reserveEach).
func (l *Limiter) reserved(s *spec, pods int64) int64 {
	return pods * l.reserveEach(s, pods)
}

// reserves reports whether s may have permits reserved for first uses,
// whatever the pods: they are on, the store is another process's, and s is
// a window's limit of at least slightPart.
func (l *Limiter) reserves(s *spec) bool {
	p := &s.params
	return l.shared && l.cfg.FirstUse() && (p.Algorithm == store.SlidingWindow || p.Algorithm == store.SlidingLog) && p.Window > 0 && p.Limit >= slightPart
}

// firstUse lets one permit of s's key through on this pod's reserved
// permits, when the key has no bucket here and this pod has not used them
// all for it within a window (ok).
func (l *Limiter) firstUse(s *spec, tokens int64, strict bool, now int64) (verdict, bool) {
	c, ok := l.claimFirst(s, tokens, strict, now)
	if !ok {
		if c.each > 0 {
			firstUseSeen.Inc()
		}
		return verdict{}, false
	}
	firstUseGrants.Inc()
	// As the store would answer a key whose reserved permits were all
	// used, but this pod's left: the remaining budget the store's next
	// answer starts from once they are (with one pod, the limit less the
	// key's uses, as though each had asked the store).
	return s.decision(true, s.limit-c.each*c.pods+c.each-c.used, 0, int64(s.params.Window)), true
}

// lastUse lets through a request that d refused on this pod's reserved
// permits, when the pod has some left for the key within a window: a key
// whose bucket lives from one window to the next (a busy one) takes no
// first use, and would otherwise be held to the limit less the pods'
// permits. ok tells that it did, and d is then the grant.
func (l *Limiter) lastUse(s *spec, d *verdict, tokens int64, strict bool, now int64) bool {
	if d.Allowed || d.Unavailable {
		return false
	}
	if _, ok := l.claimFirst(s, tokens, strict, now); !ok {
		return false
	}
	firstUseGrants.Inc()
	d.Allowed, d.Remaining, d.RetryAfter = true, 0, 0
	return true
}

// firstClaim is a claim of a reserved permit: each is the permits the
// store keeps for each of pods pods (0: none), used how many of this pod's
// the key has used in the window, the claimed one included.
type firstClaim struct{ each, pods, used int64 }

// claimFirst claims one of this pod's reserved permits of s's key for the
// window (see firstUse); ok is false when there are none or the key used
// them all within the window. Not for a request of more than one permit,
// a cost limit, a pod that asks the store for every decision (strict), nor
// while the store fails under a policy other than the local one (its
// refusals, or its free passage, are the operator's choice).
func (l *Limiter) claimFirst(s *spec, tokens int64, strict bool, now int64) (c firstClaim, ok bool) {
	if tokens != 1 || strict || s.meter != nil || !l.reserves(s) { // the pods are read only for a limit that may qualify
		return c, false
	}
	c.pods = l.podsSeen()
	c.each = l.reserveEach(s, c.pods)
	if c.each == 0 || l.policy != FailLocal && !l.StoreHealthy() {
		return c, false
	}
	c.used, ok = l.kept.firstUses.claim(s.key(), s.params.Window, c.each, now)
	return c, ok
}

// firstUses counts, for each window length, the keys' uses of this pod's
// reserved permits (Limiter.firstUse), for a window at least. A reload's
// limiter takes them over with the buckets.
type firstUses struct {
	windows *xsync.Map[time.Duration, *useFilter]
}

func newFirstUses() *firstUses {
	return &firstUses{windows: xsync.NewMap[time.Duration, *useFilter]()}
}

// claim records a use of key at now when it had fewer than most within
// window, and returns how many it has had, that one included (ok); of
// concurrent claims of one key, no more than most succeed.
func (f *firstUses) claim(key []byte, window time.Duration, most, now int64) (int64, bool) {
	uf, _ := f.windows.LoadOrCompute(window, func() (*useFilter, bool) {
		return &useFilter{window: int64(window)}, false
	})
	return uf.claim(xxhash.Sum64(key), most, now)
}

// A useFilter counts keys' uses in generations: a key's hash picks one
// 64-bit word and a 12-bit fingerprint, and the word holds four 16-bit
// slots, each a fingerprint and a 4-bit count of its uses; one
// compare-and-swap both tests and records a claim. A key's count is the
// sum of its slots' in the generations kept. Another key of the same word
// and fingerprint (one in a thousand or so at the most keys a word) only
// adds to a key's count, and a key whose word has no free slot is taken
// as used: both only send the key to the store sooner, never let one more
// through.
// The open generation is sealed after a window, or sooner when it holds
// loadMost keys a word (a new one, four times the size, takes the rest);
// a sealed one is dropped once its latest use has been recorded for a
// window. Its memory is bounded: at most maxUseWords words a generation
// (8 MB), beyond which the filter fills and sends more keys to the store
// instead of growing.
type useFilter struct {
	window int64
	mu     sync.RWMutex // claims hold it shared; sealing and dropping, alone
	gens   []*useGen    // oldest first; the last is open
}

type useGen struct {
	words  []atomic.Uint64 // a power of two
	keys   atomic.Int64    // the slots taken
	opened int64           // unix nanos
	sealed int64           // unix nanos; 0 while open
	latest atomic.Int64    // the latest time a claim recorded in it was made at (a caller's clock may lag the sealer's)
}

const (
	minUseWords = 1 << 10
	maxUseWords = 1 << 20
	// loadMost is how many keys a word holds on average before a larger
	// generation opens: a key finds its word's four slots taken about one
	// time in 150 by then, and once in 400 over the generation's life.
	loadMost = 1
)

func newUseGen(words int, now int64) *useGen {
	return &useGen{words: make([]atomic.Uint64, words), opened: now}
}

// slot is h's word in g and its fingerprint (never 0: a 0 slot is free).
func (g *useGen) slot(h uint64) (*atomic.Uint64, uint64) {
	return &g.words[h&uint64(len(g.words)-1)], max(h>>52, 1)
}

// find returns the count of fingerprint fp in word w and the shift of its
// slot (ok), else the shift of a free slot (free; none: the word is full).
func find(w, fp uint64) (c int64, at uint, ok, free bool) {
	for s := uint(0); s < 64; s += 16 {
		v := w >> s & 0xFFFF
		if v>>4 == fp {
			return int64(v & 15), s, true, false
		}
		if v == 0 && !free {
			at, free = s, true
		}
	}
	return 0, at, false, free
}

// full reports whether g holds loadMost keys a word and may grow.
func (g *useGen) full() bool {
	return len(g.words) < maxUseWords && g.keys.Load() >= loadMost*int64(len(g.words))
}

func (g *useGen) count(h uint64) int64 {
	w, fp := g.slot(h)
	c, _, _, _ := find(w.Load(), fp)
	return c
}

// add records a use of h at now when before (its count in the sealed
// generations) and its count in g are under most (at most 15), and returns
// its count with it.
func (g *useGen) add(h uint64, before, most, now int64) (int64, bool) {
	w, fp := g.slot(h)
	for {
		old := w.Load()
		c, at, ok, free := find(old, fp)
		if before+c >= most || !ok && !free {
			return before + c, false
		}
		next := old + 1<<at // c < 15: the count does not carry
		if !ok {
			next = old | (fp<<4|1)<<at
		}
		if w.CompareAndSwap(old, next) {
			if !ok {
				g.keys.Add(1)
			}
			for l := g.latest.Load(); now > l && !g.latest.CompareAndSwap(l, now); l = g.latest.Load() {
			}
			return before + c + 1, true
		}
	}
}

func (f *useFilter) claim(h uint64, most, now int64) (int64, bool) {
	f.mu.RLock()
	if f.stale(now) {
		f.mu.RUnlock()
		f.renew(now)
		f.mu.RLock()
	}
	defer f.mu.RUnlock()
	last := len(f.gens) - 1
	before := int64(0)
	for _, g := range f.gens[:last] {
		before += g.count(h)
	}
	return f.gens[last].add(h, before, most, now)
}

// stale reports whether the generations need renew. The caller holds mu.
func (f *useFilter) stale(now int64) bool {
	if len(f.gens) == 0 {
		return true
	}
	open := f.gens[len(f.gens)-1]
	if now-open.opened >= f.window || open.full() {
		return true
	}
	return f.gens[0].over(now, f.window)
}

// over reports whether g is sealed and every claim in it is a window old
// (sealed, no claim joins it; the claims take mu shared, renew alone).
func (g *useGen) over(now, window int64) bool {
	return g.sealed > 0 && now-g.latest.Load() >= window
}

// renew seals the open generation when it is a window old or full,
// opening one sized for the keys it took, and drops the generations whose
// uses have all been recorded for a window.
func (f *useFilter) renew(now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.gens) == 0 {
		f.gens = append(f.gens, newUseGen(minUseWords, now))
	}
	open := f.gens[len(f.gens)-1] // the last is always open
	if full := open.full(); full || now-open.opened >= f.window {
		keys, next := open.keys.Load(), len(open.words)*4 // full: the keys come faster than it holds them
		if !full {
			next = minUseWords // a window's keys, at a key a word
			for next < maxUseWords && int64(next) < keys {
				next *= 2
			}
		}
		open.sealed = now
		f.gens = append(f.gens, newUseGen(min(next, maxUseWords), now))
	}
	keep := f.gens[:0]
	for _, g := range f.gens {
		if !g.over(now, f.window) {
			keep = append(keep, g)
		}
	}
	clear(f.gens[len(keep):])
	f.gens = keep
}
