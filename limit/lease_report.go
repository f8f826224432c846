package limit

import (
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// giveBack is what the next lease call reports about a bucket's previous
// lease: its n unused permits go back to the store, and the store re-dates
// the used ones to the call (see LeaseRequest.Used); and the permits the
// local policy let through since the last call that reached the store
// (LeaseRequest.Spent).
type giveBack struct {
	n, used, ref, spent int64
	spentAgo            time.Duration // since the last spent permit (LeaseRequest.SpentAgo)
	spentBefore         [store.SpentParts]store.SpentPart
	at                  int64 // unix nanos the spent times are measured from
	localRef            int64 // where the local share counted the lease (creditLocally)
}

// takeReturn empties the bucket of its unused permits (expired or too few
// for the request) and returns what to report to the store: at most what
// the lease granted, and nothing once the lease no longer counts anyway.
// The caller holds b.mu.
func (b *bucket) takeReturn(now int64) giveBack {
	n := min(b.permits+b.expired, b.leased)
	used := b.leased - n
	b.permits, b.expired, b.leased = 0, 0, 0
	b.gen++ // refunds of the old lease's permits are dropped from now on
	if now >= b.returnBy {
		return giveBack{}
	}
	return giveBack{n: n, used: used, ref: b.ref, localRef: b.localRef}
}

// spentTotal is the permits ret reports as let through without the store.
func (ret *giveBack) spentTotal() int64 {
	n := ret.spent
	for _, p := range ret.spentBefore {
		n += p.N
	}
	return n
}

// spentSlots is the number of slots of bucket.spent: the newest and one
// for each SpentBefore part. Four quarter windows before the newest cover
// every permit still in the window.
const spentSlots = store.SpentParts + 1

// spentWidth is the width of a slot of bucket.spent for a window (0 for a
// token bucket, whose spent tokens are taken at once: one slot).
func spentWidth(window time.Duration) int64 {
	return int64(window) / store.SpentParts
}

// hasSpent tells whether b holds permits let through locally that the
// store has not been told of. The caller holds b.mu.
func (b *bucket) hasSpent() bool {
	for _, n := range b.spent {
		if n != 0 {
			return true
		}
	}
	return false
}

// addSpent counts n permits the local policy let through at now. The
// caller holds b.mu.
func (b *bucket) addSpent(n, now, width int64) {
	k := int64(0)
	if width > 0 {
		k = now / width
	}
	switch {
	case k > b.spentSlot:
		for i := b.spentSlot + 1; i <= min(k, b.spentSlot+spentSlots); i++ {
			b.spent[i%spentSlots] = 0
		}
		b.spentSlot = k
	case k <= b.spentSlot-spentSlots:
		return // a window old (put back late): out of every window to come
	}
	b.spent[k%spentSlots] += n
	b.spentAt = max(b.spentAt, now)
}

// spentParts empties the spent slots into what a lease call reports at now:
// the newest slot as Spent, dated by its last permit, and the earlier ones
// each dated by the end of its slot (later than any of its permits). Slots
// a window old or more are dropped. Algorithms other than sliding_window
// take one part, dated by the last permit: all are counted later than they
// were let through, never forgotten. The caller holds b.mu.
func (b *bucket) spentParts(now int64, s *spec) (spent int64, ago time.Duration, before [store.SpentParts]store.SpentPart) {
	width := spentWidth(s.params.Window)
	window := int64(s.params.Window)
	for i := 1; i < spentSlots; i++ {
		k := b.spentSlot - int64(i)
		if k < 0 {
			break
		}
		n := b.spent[k%spentSlots]
		b.spent[k%spentSlots] = 0
		end := (k + 1) * width
		if n == 0 || (window > 0 && end+window <= now) {
			continue
		}
		if s.params.Algorithm != store.SlidingWindow {
			spent += n
			continue
		}
		before[i-1] = store.SpentPart{N: n, Ago: min(time.Duration(max(now-end, 0)), store.MaxWindow)}
	}
	spent += b.spent[b.spentSlot%spentSlots]
	b.spent[b.spentSlot%spentSlots] = 0
	if spent > 0 {
		ago = min(time.Duration(max(now-b.spentAt, 0)), store.MaxWindow)
	}
	return spent, ago, before
}

// unspend puts back the spent parts of a call, made at now, that the store
// did not take (the call was not sent, failed, or ran past its deadline):
// the next call reports them. The caller holds b.mu.
func (b *bucket) unspend(now int64, p *store.Params, spent int64, ago time.Duration, before [store.SpentParts]store.SpentPart) {
	width := spentWidth(p.Window)
	for i := store.SpentParts - 1; i >= 0; i-- {
		if p := before[i]; p.N > 0 {
			b.addSpent(p.N, now-int64(p.Ago)-1, width)
		}
	}
	if spent > 0 {
		b.addSpent(spent, now-int64(ago), width)
	}
}
