package limit

import (
	"bytes"
	"context"
	"math"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// fallbackDecision decides while the store is unavailable, per
// limits.on_store_failure. Under the local policy a request passes when the
// pod's share of the limit has room (localShare) and, with a bucket b (its
// mutex held) that the store answered within the last window, what that
// answer left has room too (fallbackRoom); what passes is counted in b, for
// the store (see bucket.addUnleased). open tells that the store's breaker is
// open (a failure that lasts), not that one call failed; now is b's time.
func (l *Limiter) fallbackDecision(ctx context.Context, s *spec, tokens int64, b *bucket, open bool, now int64) verdict {
	switch l.policy {
	case FailOpen:
		fallbackOpen.Inc()
		return s.decision(true, s.limit, 0, 0)
	case FailClosed:
		fallbackClosed.Inc()
		d := s.decision(false, 0, l.cfg.BreakerCooldown, 0)
		d.Unavailable = true
		return d
	}
	fallbackLocal.Inc()
	p := l.localShare(s)
	limit := p.Limit
	if p.Algorithm == store.TokenBucket {
		limit = p.Capacity
	}
	if b != nil && !l.fallbackRoom(s, b, tokens, now, open) {
		fallbackDeniedAnswer.Inc()
		b.aloneState().refusedAt = now
		d := s.decision(false, 0, l.cfg.BreakerCooldown, 0)
		d.Limit = limit
		return d
	}
	// Counted from the decision plus the time a decided request may take to
	// be used (forwarded), as the store counts its own grants (useWithin):
	// a window of uses never holds more than the share.
	res, err := l.shareOf(s, b, l.now().UnixNano()).Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Kept: s.kept, Params: p, Want: tokens, Need: tokens, UseWithin: l.shareSlack()})
	if err != nil { // only a malformed request: decide like the store would
		return s.decision(false, 0, l.cfg.BreakerCooldown, 0)
	}
	allowed := res.Granted >= tokens
	if !allowed {
		fallbackDeniedShare.Inc()
		if b != nil {
			b.aloneState().refusedAt = now
		}
	} else if b != nil {
		if b.answeredAt == 0 {
			fallbackUnanswered.Add(int(tokens))
		}
		// Reported with the bucket's next call that reaches the store, so
		// that the store, once it answers again, does not grant the
		// window's whole budget on top of these.
		b.addUnleased(tokens, now, unleasedWidth(&s.params), s.countsUntil(now))
		b.aloneState().fallbackUsed += tokens
	}
	d := s.decision(allowed, res.Remaining, res.RetryAfter, int64(res.Reset))
	d.Limit = limit
	return d
}

// fallbackRoom reports whether the local policy may let tokens more through
// on b's key, given the store's last answer for it: that answer's remaining
// budget was all the pods' to share, so this pod takes at most its share of
// it (remaining ÷ pods). Beyond that, the pod's share of the permits counted
// then comes back as they leave the window, in one of two ways:
//
//   - A key that was not contested (the store refused none of it within a
//     window before its calls began to fail): its clients ask for less than
//     the limit, so the pods that still reach the store (if any) take no
//     more than their clients ask either; the permits come back as they
//     leave (freed): none before the first of them leaves, whole once the
//     last has. Whether the breaker is open or one call timed out, a client
//     under its limit is served.
//   - A contested key: the pods that reach the store take whatever leaves
//     the window, and what the answer left too, so this pod gets nothing
//     of either until they hold its share free for it (heldShare: after they
//     can have noticed its heartbeats stopped, and a window on: within
//     PartitionHold), then its share. Without that, one pod cut off from the
//     store granted its whole share on top of the limit the others took,
//     and its share of what the answer left (52 in a second for 50, over 6
//     pods). A token bucket's share refills from the hold on (heldRefill).
//
// An answer from a store that lost the key's writes within a window before
// (checkSeq) says nothing of the window: its remaining budget did not count
// the permits it lost, which the pods used, and its first counted permit
// is one granted after the loss, so none of its permits leave for up to a
// window (clients under their limit were refused while the others' leases
// held the rest). A key that was not contested gets its local share,
// which counted the pod's grants from before the loss as after it: its
// clients ask for less than the limit, and the pod keeps to its share of
// it.
//
// The caller holds b.mu.
func (l *Limiter) fallbackRoom(s *spec, b *bucket, tokens, now int64, open bool) bool {
	if b.answeredAt == 0 {
		return true
	}
	pods := float64(l.podsSeen())
	left := float64(min(max(b.remaining, 0), s.limit))
	credit := b.freed(now)
	lost := b.emptiedAt() > 0 && b.answeredAt-b.emptiedAt() < int64(s.recoveryWindow())
	if lost {
		credit = 1 // a key not contested: its share alone, see below
	}
	if l.contested(s, b) {
		// What the answer left is the others' to take; its share comes
		// back only while they hold it (none with the breaker closed: a
		// slow moment).
		left = 0
		credit = l.heldShare(s, b, now, open)
		if s.params.Algorithm == store.TokenBucket && credit > 0 {
			return float64(b.fallbackUsed()+tokens) <= float64(s.limit)/pods*l.heldRefill(s, b, now, open)
		}
	}
	if credit >= 1 {
		return true
	}
	room := left/pods + (float64(s.limit)-left)/pods*credit
	return float64(b.fallbackUsed()+tokens) <= room
}

// freed is the part (0..1) of the permits counted in the store's last
// answer for b's key that have left the window by now: none before the
// first of them leaves (freeAt), all once the last has (resetAt), in
// proportion to the time between (the store tells only the two ends). A
// token bucket's refill runs from the answer on: its freeAt is the answer.
// The caller holds b.mu.
func (b *bucket) freed(now int64) float64 {
	switch {
	case now < b.freeAt():
		return 0
	case now >= b.resetAt:
		return 1
	}
	return float64(now-b.freeAt()) / float64(b.resetAt-b.freeAt())
}

// countsUntil is when a permit of s used at now stops counting in any
// window to come: a window later; for a token bucket, its refill time
// (capacity ÷ rate) later: by then the refill has put back a whole bucket
// since the token was taken, so reported later it would take a token the
// bucket has in fact (math.MaxInt64 when it never refills); for a quota,
// the end of the period it was used in.
func (s *spec) countsUntil(now int64) int64 {
	p := &s.params
	switch p.Algorithm {
	case store.TokenBucket:
		if p.RefillRate <= 0 {
			return math.MaxInt64
		}
		return now + int64(s.window) // s.window: capacity ÷ refill rate
	case store.Quota:
		_, end := p.Period.Bounds(time.Unix(0, now), p.Zone)
		return end.UnixNano()
	}
	return now + int64(p.Window)
}

// contested tells that the store refused b's key within a window before
// its calls began to fail: its clients asked for more than the limit, and
// any pod that still reaches the store takes whatever budget frees up. A low
// remaining alone is no such sign: it also holds the permits leased to pods
// and not yet used, so refusing on it refused clients under their limit
// when a call timed out. The caller holds b.mu.
func (l *Limiter) contested(s *spec, b *bucket) bool {
	if s.window <= 0 || l.podsSeen() <= 1 {
		return false // no other pod takes what the last answer left
	}
	at := b.deniedAt()
	return at > 0 && b.failingSince()-at < int64(s.window)
}

// contestedNow tells that the store refused b's key within a window, or
// had when this pod's calls for it began to fail (contested): its clients
// ask for more than the limit. The caller holds b.mu.
func (l *Limiter) contestedNow(s *spec, b *bucket, now int64) bool {
	at := b.deniedAt()
	return l.contested(s, b) || at > 0 && now-at < int64(s.window)
}

// refusedAlone tells that the local policy refused b's key within a window
// (the pod's share, deciding alone, had no room for its clients), while
// the pod is back from an outage of its own and the others may not have
// read its heartbeat yet (StoreReachable). The store may have refused none
// of the key's requests before the outage (its calls were slow, and timed
// out), so the key is not taken for contested; but what the pod let through
// alone is reported now, before the others stop holding its share: its
// clients ask more than its share, and the others may take that share again
// once they read the heartbeat (62 in a second for 51, over 4 pods, a slow
// store and then a pod cut off). The caller holds b.mu.
func (l *Limiter) refusedAlone(s *spec, b *bucket, now int64) bool {
	return now < l.reportsFrom.Load() && b.alone != nil && b.alone.refusedAt > 0 && now-b.alone.refusedAt < int64(s.window)
}

// failing records a failed store call for b's key at now: the first after
// an answer begins a stretch of failures (failingSince). The caller holds
// b.mu.
func (b *bucket) failing(now int64) {
	a := b.aloneState()
	if a.failingSince <= b.answeredAt {
		a.failingSince = now
	}
	a.failedAt = now
}

// recovering tells that a store call for b's key failed, or the local
// policy let permits through on it, within the last window: the other pods
// most likely decided the key alone too, and their next calls, which report
// what they let through, may come after this one. Until a window has passed
// the store's remaining budget can hold permits that they used, so this
// pod keeps to its local share. The caller holds b.mu.
func (l *Limiter) recovering(s *spec, b *bucket, now int64) bool {
	last := b.failedAt()
	if b.alone != nil {
		last = max(last, b.alone.unleasedAt)
	}
	w := s.recoveryWindow()
	return l.shared && l.policy == FailLocal && last > 0 && w > 0 && now-last < int64(w)
}

// drains tells that b's key is a token bucket that the store lost within
// its refill time (checkSeq): what keepShare trims from a grant is then not
// given back. The store's bucket started full again while the pods had
// taken its tokens, and unlike a window's count, whose lost permits would
// have left it a window later anyway, the difference lasts as long as the
// clients ask for the refill rate or more: the store refills as fast as
// the shares let the pods take. Kept out of the store, the trimmed tokens
// drain its bucket to about what the pods have left in theirs; a pod trims
// only when its own share is spent, so a client under its limit loses
// nothing to it. The caller holds b.mu.
func (l *Limiter) drains(s *spec, b *bucket, now int64) bool {
	w := s.recoveryWindow()
	return s.params.Algorithm == store.TokenBucket && b.emptiedAt() > 0 && w > 0 && now-b.emptiedAt() < int64(w)
}

// recoveryWindow is how long a pod's grants of s's key count after it made
// them, and so how long after a failure it keeps to its local share
// (recovering): the window of a sliding limit, the time a token bucket
// takes to refill whole (0 when it never refills); 0 for a calendar quota,
// whose grants count to the end of their period: a pod does not keep to
// its share for a month after a failure.
func (s *spec) recoveryWindow() time.Duration {
	if s.params.Algorithm == store.TokenBucket {
		return s.window
	}
	return s.params.Window
}

// keepShare trims a grant res of the store to what this pod's local share
// grants of it (see recovering), taking those permits from the share in the
// same step, so that concurrent grants cannot each find the same room: the
// rest returns to the store (unless drain: see drains), and a grant left
// with fewer than tokens is refused whole. It returns where the share
// counted the kept permits and whether it did (then the caller does not
// count them again). b is the key's bucket, whose mutex the caller holds
// (nil: none), and now the time.
func (l *Limiter) keepShare(ctx context.Context, s *spec, b *bucket, req *store.LeaseRequest, res store.LeaseResult, tokens int64, drain bool, now int64) (store.LeaseResult, int64, bool) {
	local, err := l.shareOf(s, b, now).Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Kept: s.kept, Params: l.localShare(s),
		Want: res.Granted, Need: tokens, LeaseTTL: s.ttl, UseWithin: l.shareSlack()})
	keep := local.Granted
	if err != nil {
		keep = 0
	}
	switch {
	case keep >= res.Granted:
		return res, local.Ref, true
	case keep < tokens:
		recoveryTrims.Add(int(res.Granted))
		if !drain {
			go l.returnGrant(req, res)
		}
		// Refused until the share frees a permit (cached so, see
		// cacheRefusal): for longer, a client the share has room for
		// again would be refused.
		res.Granted, res.Remaining, res.RetryAfter = 0, 0, maxCachedDenial
		if err == nil && local.RetryAfter > 0 {
			res.RetryAfter = min(local.RetryAfter, maxCachedDenial)
		}
		return res, 0, false
	}
	// The permits beyond the request's are leased ones (counted at Ref).
	recoveryTrims.Add(int(res.Granted - keep))
	if !drain {
		go l.returnPermits(req, res.Granted-keep, res.Ref)
	}
	res.Granted = keep
	return res, local.Ref, true
}

// shareSlack is how long after a decision the local share still counts
// its permits past the window: a request decided now reaches the backend
// later (a pod that answers a burst of store replies at once runs late by
// tens of milliseconds), and a window of arrivals must not hold more than
// the share. The store's deadline is the bound used: a pod that runs later
// than that fails its store calls anyway.
func (l *Limiter) shareSlack() time.Duration { return min(l.cfg.StoreTimeout, time.Second) }

// localShare is s's params for this pod alone: its share of the limit.
//
// The share rounds down (the pods together never exceed the limit), but a
// limit that is on keeps at least 1 per pod: rounding a small limit to 0
// would refuse every client while the store fails.
func (l *Limiter) localShare(s *spec) store.Params {
	pods := l.podsSeen()
	p := s.params
	if p.Algorithm == store.TokenBucket {
		if p.Capacity > 0 {
			p.Capacity = max(p.Capacity/pods, 1)
		}
		p.RefillRate /= float64(pods)
	} else if p.Limit > 0 {
		// Less the pods' reserved permits, which their first uses take.
		p.Limit = max((p.Limit-l.reserved(s, pods))/pods, 1)
	}
	return p
}

// slightPart: a key whose count in the store is at most its limit ÷
// slightPart is slight (Limiter.slight).
const slightPart = 1000

// slight reports whether a store answer that left remaining of s's budget
// puts the key's count in the store at a thousandth of its limit or less:
// a limit of a window or a period (not a token bucket, whose remaining
// tokens tell no count) of 1,000 or more. The store's budget leaves out
// the permits it keeps for the pods' first uses (Limiter.reserved), which
// the pods count apart. See useLocally and bucketTable.sweep.
func (l *Limiter) slight(s *spec, remaining int64) bool {
	p := &s.params
	if p.Algorithm == store.TokenBucket || p.Limit < slightPart || remaining < 0 {
		return false
	}
	r := int64(0)
	if l.reserves(s) { // the pods are read only for a limit that may reserve
		r = l.reserved(s, l.podsSeen())
	}
	return (p.Limit-r-remaining)*slightPart <= p.Limit
}

// useLocally takes the n permits the store just granted from this pod's
// local share too, under the local policy. Without it the share would be
// full whenever the store fails: a pod whose store call timed out, having
// already let through its share of the window from the store's permits,
// would let through as many again from the local share (one more window's
// worth for every stretch of timeouts). It returns where the share counted
// them, for returnLocally. At most one memory-store call per store call,
// which the local fast path does not make; none for a lease its bucket
// counts itself (holdShare).
//
// Every permit is counted, even past the share: a pod that leased more than
// its share has used more, and its share must stay used up until those leave
// the window (a capped count would forget the last ones first). The leased
// permits count from the lease's expiry, as the store counts them.
//
// A slight grant (the store's count after it, read from the remaining
// budget it left, is a thousandth of the limit or less: Limiter.slight) is not
// counted: most keys of a large population are slight, and their counts
// would take a memory-store entry each for nothing. What the shares then
// miss in a window is bounded: the last slight grant in it saw a count that
// held every grant of the window before it, so the pods together miss a
// thousandth of the limit at most.
//
// A lease of bucket b (nil: none, or not b's lease) may be counted in b
// itself (holdShare): the count then is what it returns.
func (l *Limiter) useLocally(ctx context.Context, s *spec, b *bucket, n, remaining int64) int64 {
	if !l.shared || l.policy != FailLocal || n <= 0 {
		return 0
	}
	if l.slight(s, remaining) {
		slightGrants.Inc()
		return 0
	}
	if l.holdShare(s, b, n) {
		return n
	}
	p := l.localShare(s)
	if p.Algorithm != store.TokenBucket {
		p.Limit = store.MaxLimit // count, never refuse
	}
	res, _ := l.fallback.Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Kept: s.kept, Params: p, Want: n, LeaseTTL: s.ttl, UseWithin: l.shareSlack()})
	return res.Ref
}

// returnLocally returns to the local share n permits of a lease that went
// unused (counted at ref by useLocally): the share counts what the pod
// used, so a pod that leased much and used little is not held to less than
// its share when the store fails. Credited whether or not the store gets
// its return: the permits were not used.
func (l *Limiter) returnLocally(ctx context.Context, s *spec, n, ref int64) {
	if !l.shared || l.policy != FailLocal || n <= 0 || ref == 0 { // 0: not counted (useLocally)
		return
	}
	_, _ = l.fallback.Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Kept: s.kept, Params: l.localShare(s), Return: n, ReturnRef: ref})
}
