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
// send a request or two in a window, far under a limit of thousands: with
// a store call each, the store pays for every request of the population,
// and the pod keeps a bucket for each. So the store keeps one permit of
// every key reserved for each pod: it grants at most the limit less one
// permit a pod, and each pod lets a key's first request of a window through
// on the permit reserved for it, without a store call and without a
// bucket. It remembers the keys it did so for a window (firstUses); a key's
// next request in that window goes to the store, as before.
//
// In any window, the store's grants (the limit less the pods' permits) and
// the pods' first uses (one each at most) add up to the limit: the bound
// is exact. Only a limit of a window (sliding_window or sliding_log) of at
// least a thousand a pod reserves (Limiter.reserved): the store's limit is
// lower by a thousandth at most. While the pods seen change, a limit can
// be exceeded by the first uses of the pods not yet counted: a thousandth
// of it at most, as the limit of one whose reservation stops (fewer than a
// thousand a pod) still had them in its window.

// firstUseGrants counts the decisions made on a pod's reserved permit.
var firstUseGrants = metrics.NewCounter(`sentinel_limit_first_use_grants_total`)

// firstUseSeen counts the decisions of keys that had no bucket, could have
// been a first use, but had one in the window already (or a false
// positive of the filter), and went to the store.
var firstUseSeen = metrics.NewCounter(`sentinel_limit_first_use_seen_total`)

// reserved is how many permits of s's limit the store keeps for the pods'
// first uses: one a pod, when they are on (limits.first_uses), the store is
// another process's, and s is a window's limit of at least slightPart a
// pod; else 0.
func (l *Limiter) reserved(s *spec, pods int64) int64 {
	if !l.reserves(s) || s.params.Limit < slightPart*pods {
		return 0
	}
	return pods
}

// reserves reports whether s may have permits reserved for first uses,
// whatever the pods: they are on, the store is another process's, and s is
// a window's limit of at least slightPart.
func (l *Limiter) reserves(s *spec) bool {
	p := &s.params
	return l.shared && l.cfg.FirstUse() && (p.Algorithm == store.SlidingWindow || p.Algorithm == store.SlidingLog) && p.Window > 0 && p.Limit >= slightPart
}

// firstUse lets one permit of s's key through on this pod's reserved
// permit, when the key has no bucket here and this pod has not done so for
// it within a window (ok).
func (l *Limiter) firstUse(s *spec, tokens int64, strict bool, now int64) (verdict, bool) {
	r, ok := l.claimFirst(s, tokens, strict, now)
	if !ok {
		if r > 0 {
			firstUseSeen.Inc()
		}
		return verdict{}, false
	}
	firstUseGrants.Inc()
	// As the store would answer a key whose reserved permits were all used:
	// the remaining budget the store's next answer starts from.
	return s.decision(true, s.limit-r, 0, int64(s.params.Window)), true
}

// lastUse lets through a request that d refused on this pod's reserved
// permit, when the pod has not used it for the key within a window: a key
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

// claimFirst claims this pod's reserved permit of s's key for the window
// (see firstUse) and returns the permits reserved (0: none); ok is false
// when there are none or the permit was used within the window. Not for
// a request of more than one permit, a cost limit, a pod that asks the
// store for every decision (strict), nor while the store fails under a
// policy other than the local one (its refusals, or its free passage, are
// the operator's choice).
func (l *Limiter) claimFirst(s *spec, tokens int64, strict bool, now int64) (int64, bool) {
	if tokens != 1 || strict || s.meter != nil || !l.reserves(s) { // the pods are read only for a limit that may qualify
		return 0, false
	}
	r := l.reserved(s, l.podsSeen())
	if r == 0 || l.policy != FailLocal && !l.StoreHealthy() {
		return 0, false
	}
	return r, l.kept.firstUses.claim(s.key(), s.params.Window, now)
}

// firstUses remembers, for each window length, the keys this pod let
// through on their reserved permit (Limiter.firstUse), for a window at
// least. A reload's limiter takes them over with the buckets.
type firstUses struct {
	windows *xsync.Map[time.Duration, *useFilter]
}

func newFirstUses() *firstUses {
	return &firstUses{windows: xsync.NewMap[time.Duration, *useFilter]()}
}

// claim reports whether key had no first use within window and records
// one at now. Of the concurrent claims of one key, one succeeds.
func (f *firstUses) claim(key []byte, window time.Duration, now int64) bool {
	uf, _ := f.windows.LoadOrCompute(window, func() (*useFilter, bool) {
		return &useFilter{window: int64(window)}, false
	})
	return uf.claim(xxhash.Sum64(key), now)
}

// A useFilter is a blocked Bloom filter of keys in generations: a key's
// hash sets 4 bits in one 64-bit word, so that one compare-and-swap both
// tests and records it. A false positive (another key's bits) only sends
// a key to the store; a key is never missed while its generation is kept.
// The open generation is sealed after a window, or sooner when it holds
// loadMost keys a word (a new one, four times the size, takes the rest);
// a sealed one is dropped once its latest key has been recorded for a
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
	claims atomic.Int64
	opened int64        // unix nanos
	sealed int64        // unix nanos; 0 while open
	latest atomic.Int64 // the latest time a claim recorded in it was made at (a caller's clock may lag the sealer's)
}

const (
	minUseWords = 1 << 10
	maxUseWords = 1 << 20
	loadMost    = 4 // keys a word before a larger generation opens (a false positive in about 200)
)

func newUseGen(words int, now int64) *useGen {
	return &useGen{words: make([]atomic.Uint64, words), opened: now}
}

// word and mask are h's word in g and its 4 bits there.
func (g *useGen) word(h uint64) (*atomic.Uint64, uint64) {
	mask := uint64(1)<<(h>>40&63) | uint64(1)<<(h>>46&63) | uint64(1)<<(h>>52&63) | uint64(1)<<(h>>58)
	return &g.words[h&uint64(len(g.words)-1)], mask
}

// full reports whether g holds loadMost keys a word and may grow.
func (g *useGen) full() bool {
	return len(g.words) < maxUseWords && g.claims.Load() >= loadMost*int64(len(g.words))
}

func (g *useGen) has(h uint64) bool {
	w, mask := g.word(h)
	return w.Load()&mask == mask
}

// set records h, claimed at now; false when it was there.
func (g *useGen) set(h uint64, now int64) bool {
	w, mask := g.word(h)
	for {
		old := w.Load()
		if old&mask == mask {
			return false
		}
		if w.CompareAndSwap(old, old|mask) {
			g.claims.Add(1)
			for l := g.latest.Load(); now > l && !g.latest.CompareAndSwap(l, now); l = g.latest.Load() {
			}
			return true
		}
	}
}

func (f *useFilter) claim(h uint64, now int64) bool {
	f.mu.RLock()
	if f.stale(now) {
		f.mu.RUnlock()
		f.renew(now)
		f.mu.RLock()
	}
	defer f.mu.RUnlock()
	last := len(f.gens) - 1
	for _, g := range f.gens[:last] {
		if g.has(h) {
			return false
		}
	}
	return f.gens[last].set(h, now)
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
// keys have all been recorded for a window.
func (f *useFilter) renew(now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.gens) == 0 {
		f.gens = append(f.gens, newUseGen(minUseWords, now))
	}
	open := f.gens[len(f.gens)-1] // the last is always open
	if full := open.full(); full || now-open.opened >= f.window {
		claims, next := open.claims.Load(), len(open.words)*4 // full: the keys come faster than it holds them
		if !full {
			next = minUseWords // a window's keys, at a key a word
			for next < maxUseWords && int64(next) < claims {
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
