package limit

import (
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// report is what the next lease call reports about a bucket: the previous
// lease's unused permits, which it returns to the store, and how many of
// its permits were used (LeaseRequest.Used: the store counts them from the
// call rather than until the lease expires); and the permits the pod let
// through without a lease since its last call that reached the store
// (LeaseRequest.Unleased, UnleasedAgo, UnleasedBefore).
type report struct {
	unused, used, ref, unleased int64
	unleasedAgo                 time.Duration // since the last unleased permit (LeaseRequest.UnleasedAgo)
	unleasedBefore              [store.UnleasedParts]store.UnleasedPart
	at                          int64 // unix nanos the unleased permits' times are measured from
	localRef                    int64 // where the local share counted the lease (returnLocally)
	// contested tells that the store refused the key within a window, or
	// had when the pod's calls for it began to fail (see storeParams).
	contested bool
	// level is what the key's last store answer left of a token bucket,
	// levelAgo before the call (LeaseRequest.Level), when levelKnown.
	level      int64
	levelAgo   time.Duration
	levelKnown bool
}

// endLease empties the bucket of its unused permits (expired or too few
// for the request) and returns what to report to the store: at most what
// the lease granted returns, and nothing once the lease no longer counts
// anyway.
// The caller holds b.mu.
func (b *bucket) endLease(p *store.Params, now int64) report {
	n := min(b.permits+b.expired, b.leased)
	// Permits reserved for answers not yet settled are not reported used:
	// they stay counted where the lease was until it expires plus a window,
	// so that what a settlement gives back returns there (Limiter.Settle).
	var reserved int64
	if b.rare != nil {
		reserved, b.rare.reserved = b.rare.reserved, 0
	}
	used := max(b.leased-n-reserved, 0)
	b.permits, b.expired, b.leased = 0, 0, 0
	b.gen++ // returns of the old lease's used permits are dropped from now on
	if now >= b.returnBy(p) {
		return report{}
	}
	if b.shareKind != 0 {
		// The share's count that b holds gets the return at once (as
		// returnLocally would, whether or not the store gets it).
		b.localRef -= min(n, b.localRef)
		return report{unused: n, used: used, ref: b.ref}
	}
	return report{unused: n, used: used, ref: b.ref, localRef: b.localRef}
}

// nextReport ends b's lease and gathers what the bucket's next lease call,
// made at now, reports (see report). The caller holds b.mu.
func (b *bucket) nextReport(s *spec, now int64) report {
	ret := b.endLease(&s.params, now)
	if a := s.params.Algorithm; a == store.TokenBucket || a == store.Quota {
		// A taken token, or a quota's permit, counts from its grant (in
		// its period): no use to report.
		ret.used = 0
	}
	ret.unleased, ret.unleasedAgo, ret.unleasedBefore = b.unleasedParts(now, s)
	ret.at = now
	if p := &s.params; p.Algorithm == store.TokenBucket && b.answeredAt > 0 {
		// Only while the key cannot have expired: it lives until its
		// bucket would be full again (s.window, its refill time), or for
		// a day when it never refills.
		ago, full := now-b.answeredAt, int64(s.window)
		if full == 0 {
			full = int64(store.MaxWindow)
		}
		if ago >= 0 && ago < full {
			ret.level, ret.levelAgo, ret.levelKnown = min(max(b.remaining, 0), p.Capacity), time.Duration(ago), true
		}
	}
	if s.params.Algorithm == store.SlidingLog {
		b.keepLogExcess(&ret, now, unleasedWidth(&s.params))
	}
	return ret
}

// keepLogExcess puts back the unleased permits of ret beyond what one
// sliding_log call takes (MaxLogTokens), the newest first, at their times:
// the next call reports them. The caller holds b.mu.
func (b *bucket) keepLogExcess(ret *report, now, width int64) {
	excess := ret.unleasedTotal() - store.MaxLogTokens
	if excess <= 0 {
		return
	}
	n := min(excess, ret.unleased)
	b.addUnleased(n, now-int64(ret.unleasedAgo), width, 0)
	ret.unleased -= n
	excess -= n
	for i := range ret.unleasedBefore {
		p := &ret.unleasedBefore[i]
		n := min(excess, p.N)
		if n > 0 {
			b.addUnleased(n, now-int64(p.Ago), width, 0)
			p.N -= n
			excess -= n
		}
	}
}

// unleasedTotal is the permits ret reports as used without a lease.
func (ret *report) unleasedTotal() int64 {
	n := ret.unleased
	for _, p := range ret.unleasedBefore {
		n += p.N
	}
	return n
}

// unleasedSlots is the number of slots of an unleasedLog: the newest and one
// for each UnleasedBefore part. The eight slots of an eighth of a window
// before the newest cover every permit still in the window.
const unleasedSlots = store.UnleasedParts + 1

// unleasedWidth is the width of a slot of an unleasedLog for a limit of
// params p: an eighth (1/UnleasedParts) of the time a permit counts for, the window (for a
// token bucket the time to refill a whole bucket, after which a token taken
// no longer matters); 0 (one slot) when that time is 0 or endless.
func unleasedWidth(p *store.Params) int64 {
	if p.Algorithm == store.TokenBucket {
		if p.RefillRate <= 0 {
			return 0
		}
		return int64(float64(p.Capacity)/p.RefillRate*float64(time.Second)) / store.UnleasedParts
	}
	return int64(p.Window) / store.UnleasedParts
}

// hasUnleased tells whether b holds unleased permits that the
// store has not been told of. The caller holds b.mu.
func (b *bucket) hasUnleased() bool {
	if b.alone == nil {
		return false
	}
	for _, n := range b.alone.n {
		if n != 0 {
			return true
		}
	}
	return false
}

// unleasedTotal is the permits b's unleased log holds. The caller holds
// b.mu.
func (b *bucket) unleasedTotal() int64 {
	var total int64
	if b.alone != nil {
		for _, n := range b.alone.n {
			total += n
		}
	}
	return total
}

// addUnleased counts n permits the local policy let through at now, which
// count in the windows to come until until (see aloneState.unleasedUntil;
// 0 for permits put back, whose until was counted when they were let
// through). The caller holds b.mu.
func (b *bucket) addUnleased(n, now, width, until int64) {
	a := b.aloneState()
	o := &a.unleasedLog
	if width != o.width {
		o.rewidth(width)
	}
	if o.add(n, now) {
		a.unleasedAt = max(a.unleasedAt, now)
	}
	a.unleasedUntil = max(a.unleasedUntil, until)
}

// add counts n permits let through at now in the slot of now, unless they
// are a window old (put back late: out of every window to come).
func (o *unleasedLog) add(n, now int64) bool {
	k := int64(0)
	if o.width > 0 {
		k = now / o.width
	}
	switch {
	case k > o.slot:
		for i := o.slot + 1; i <= min(k, o.slot+unleasedSlots); i++ {
			o.n[i%unleasedSlots], o.last[i%unleasedSlots] = 0, 0
		}
		o.slot = k
	case k <= o.slot-unleasedSlots:
		return false
	}
	o.n[k%unleasedSlots] += n
	o.last[k%unleasedSlots] = max(o.last[k%unleasedSlots], now)
	return true
}

// rewidth moves the slots to slots of width (the limit's window changed
// under the key): each slot's permits go to the new slot of its last
// permit, dated by it, never earlier than any of them.
func (o *unleasedLog) rewidth(width int64) {
	old := *o
	*o = unleasedLog{width: width}
	for i := unleasedSlots - 1; i >= 0; i-- {
		if k := old.slot - int64(i); k >= 0 && old.n[k%unleasedSlots] > 0 {
			o.add(old.n[k%unleasedSlots], old.last[k%unleasedSlots])
		}
	}
}

// unleasedParts empties the unleased slots into what a lease call reports at
// now: the newest slot as Unleased and the earlier ones as UnleasedBefore,
// each dated by its last permit (the store counts none of them earlier
// than it was let through, and a slot's permits no later than its width
// after), for every algorithm: the store places each part at its time.
// Slots that no longer count (a window old or more; for a token bucket, a
// refill time) are dropped. The caller holds b.mu.
func (b *bucket) unleasedParts(now int64, s *spec) (unleased int64, ago time.Duration, before [store.UnleasedParts]store.UnleasedPart) {
	if b.alone == nil {
		return 0, 0, before
	}
	o := &b.alone.unleasedLog
	window := unleasedWidth(&s.params) * store.UnleasedParts
	for i := 1; i < unleasedSlots; i++ {
		k := o.slot - int64(i)
		if k < 0 {
			break
		}
		n, last := o.n[k%unleasedSlots], o.last[k%unleasedSlots]
		o.n[k%unleasedSlots], o.last[k%unleasedSlots] = 0, 0
		if n == 0 || (window > 0 && last+window <= now) {
			continue
		}
		before[i-1] = store.UnleasedPart{N: n, Ago: min(time.Duration(max(now-last, 0)), store.MaxWindow)}
	}
	k := o.slot % unleasedSlots
	unleased, last := o.n[k], o.last[k]
	o.n[k], o.last[k] = 0, 0
	if unleased > 0 {
		ago = min(time.Duration(max(now-last, 0)), store.MaxWindow)
	}
	return unleased, ago, before
}

// reportLater puts back the unleased parts of a call, made at now, that the store
// did not take (the call was not sent, failed, or ran past its deadline):
// the next call reports them, at the same times. The caller holds b.mu.
func (b *bucket) reportLater(now int64, p *store.Params, unleased int64, ago time.Duration, before [store.UnleasedParts]store.UnleasedPart) {
	width := unleasedWidth(p)
	for i := store.UnleasedParts - 1; i >= 0; i-- {
		if p := before[i]; p.N > 0 {
			b.addUnleased(p.N, now-int64(p.Ago), width, 0)
		}
	}
	if unleased > 0 {
		b.addUnleased(unleased, now-int64(ago), width, 0)
	}
}
