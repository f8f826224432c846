package limit

import (
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// report is what the next lease call reports about a bucket: the previous
// lease's unused permits, which it returns to the store, and how many of
// its permits were used (LeaseRequest.Used: the store counts them from the
// call rather than until the lease expires); and the permits the pod let
// through on its own since its last call that reached the store
// (LeaseRequest.Own, OwnAgo, OwnBefore).
type report struct {
	unused, used, ref, own int64
	ownAgo                 time.Duration // since the last own permit (LeaseRequest.OwnAgo)
	ownBefore              [store.OwnParts]store.OwnPart
	at                     int64 // unix nanos the own permits' times are measured from
	localRef               int64 // where the local share counted the lease (returnLocally)
}

// endLease empties the bucket of its unused permits (expired or too few
// for the request) and returns what to report to the store: at most what
// the lease granted returns, and nothing once the lease no longer counts
// anyway.
// The caller holds b.mu.
func (b *bucket) endLease(now int64) report {
	n := min(b.permits+b.expired, b.leased)
	used := b.leased - n
	b.permits, b.expired, b.leased = 0, 0, 0
	b.gen++ // returns of the old lease's used permits are dropped from now on
	if now >= b.returnBy {
		return report{}
	}
	return report{unused: n, used: used, ref: b.ref, localRef: b.localRef}
}

// nextReport ends b's lease and gathers what the bucket's next lease call,
// made at now, reports (see report). The caller holds b.mu.
func (b *bucket) nextReport(s *spec, now int64) report {
	ret := b.endLease(now)
	if a := s.params.Algorithm; a == store.TokenBucket || a == store.Quota {
		// A taken token, or a quota's permit, counts from its grant (in
		// its period): no use to report.
		ret.used = 0
	}
	ret.own, ret.ownAgo, ret.ownBefore = b.ownParts(now, s)
	ret.at = now
	if s.params.Algorithm == store.SlidingLog && ret.own > store.MaxLogTokens {
		b.addOwn(ret.own-store.MaxLogTokens, now-int64(ret.ownAgo), ownWidth(s.params.Window))
		ret.own = store.MaxLogTokens
	}
	return ret
}

// ownTotal is the permits ret reports as let through without the store.
func (ret *report) ownTotal() int64 {
	n := ret.own
	for _, p := range ret.ownBefore {
		n += p.N
	}
	return n
}

// ownSlots is the number of slots of bucket.own: the newest and one
// for each OwnBefore part. Four quarter windows before the newest cover
// every permit still in the window.
const ownSlots = store.OwnParts + 1

// ownWidth is the width of a slot of bucket.own for a window (0 for a
// token bucket, whose own tokens are taken at once: one slot).
func ownWidth(window time.Duration) int64 {
	return int64(window) / store.OwnParts
}

// hasOwn tells whether b holds permits let through locally that the
// store has not been told of. The caller holds b.mu.
func (b *bucket) hasOwn() bool {
	for _, n := range b.own {
		if n != 0 {
			return true
		}
	}
	return false
}

// addOwn counts n permits the local policy let through at now. The
// caller holds b.mu.
func (b *bucket) addOwn(n, now, width int64) {
	k := int64(0)
	if width > 0 {
		k = now / width
	}
	switch {
	case k > b.ownSlot:
		for i := b.ownSlot + 1; i <= min(k, b.ownSlot+ownSlots); i++ {
			b.own[i%ownSlots] = 0
		}
		b.ownSlot = k
	case k <= b.ownSlot-ownSlots:
		return // a window old (put back late): out of every window to come
	}
	b.own[k%ownSlots] += n
	b.ownAt = max(b.ownAt, now)
}

// ownParts empties the own slots into what a lease call reports at now:
// the newest slot as Own, dated by its last permit, and the earlier ones
// each dated by the end of its slot (later than any of its permits). Slots
// a window old or more are dropped. Algorithms other than sliding_window
// take one part, dated by the last permit: all are counted later than they
// were let through, never forgotten. The caller holds b.mu.
func (b *bucket) ownParts(now int64, s *spec) (own int64, ago time.Duration, before [store.OwnParts]store.OwnPart) {
	width := ownWidth(s.params.Window)
	window := int64(s.params.Window)
	for i := 1; i < ownSlots; i++ {
		k := b.ownSlot - int64(i)
		if k < 0 {
			break
		}
		n := b.own[k%ownSlots]
		b.own[k%ownSlots] = 0
		end := (k + 1) * width
		if n == 0 || (window > 0 && end+window <= now) {
			continue
		}
		if s.params.Algorithm != store.SlidingWindow {
			own += n
			continue
		}
		before[i-1] = store.OwnPart{N: n, Ago: min(time.Duration(max(now-end, 0)), store.MaxWindow)}
	}
	own += b.own[b.ownSlot%ownSlots]
	b.own[b.ownSlot%ownSlots] = 0
	if own > 0 {
		ago = min(time.Duration(max(now-b.ownAt, 0)), store.MaxWindow)
	}
	return own, ago, before
}

// reportLater puts back the own parts of a call, made at now, that the store
// did not take (the call was not sent, failed, or ran past its deadline):
// the next call reports them. The caller holds b.mu.
func (b *bucket) reportLater(now int64, p *store.Params, own int64, ago time.Duration, before [store.OwnParts]store.OwnPart) {
	width := ownWidth(p.Window)
	for i := store.OwnParts - 1; i >= 0; i-- {
		if p := before[i]; p.N > 0 {
			b.addOwn(p.N, now-int64(p.Ago)-1, width)
		}
	}
	if own > 0 {
		b.addOwn(own, now-int64(ago), width)
	}
}
