package limit

import (
	"context"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// returnUses returns the permits used by earlier limits to their local
// buckets when a later limit rejects the request: they stay usable until
// their lease expires. Permits of a lease the bucket has since replaced are
// not put into the new one (they were counted elsewhere). Permits that the
// store counted as used at once (the Need part of a lease call) return to
// the store: with the key's next lease call, which returns them before it
// is granted anything (settleOwed; a key of a lease of the request's tokens
// alone costs no call of its own), or in the background when the bucket
// owes permits of another call already (the refusing limit's store call
// came first, so this is not on the local fast path). An in-process store
// takes them back at once.
func (l *Limiter) returnUses(uses []use, specs []spec) {
	if len(uses) == 0 { // the first limit refused: nothing used (and no clock read)
		return
	}
	now := l.now().UnixNano()
	for i, u := range uses {
		b, tokens := u.b, u.n
		if b == nil {
			continue
		}
		if m := specs[i].meter; m != nil && m.Slots > 0 {
			l.releaseSlot(&u)
			continue
		}
		if u.usedRef != 0 {
			if w := int64(specs[i].params.Window); l.shared && w > 0 && b.owe(tokens, u.usedRef, now+w) {
				continue
			}
			req := &store.LeaseRequest{Key: []byte(b.key), Params: specs[i].params}
			if l.shared {
				go l.returnPermits(req, tokens, u.usedRef)
			} else {
				l.returnPermits(req, tokens, u.usedRef)
			}
			continue
		}
		b.mu.Lock()
		if b.gen == u.gen && now < b.expires {
			b.permits += tokens
		}
		b.mu.Unlock()
	}
}

// settleOwed takes b's owed permits (see bucket.owe) into ret, the report
// of b's lease call at now, when ret returns nothing else (one return per
// call: a lease of the request's tokens alone, the rare key's), or else
// returns them in a call of their own, in the background. Owed permits
// that no longer count are dropped. The caller holds b.mu.
func (l *Limiter) settleOwed(s *spec, b *bucket, ret *report, now int64) {
	o := b.rare.owed
	n, ref := o.n, o.ref
	o.n, o.ref = 0, 0
	switch {
	case now >= o.by:
	case ret.unused == 0 && ret.used == 0:
		ret.unused, ret.ref, ret.localRef = n, ref, 0
	default:
		go l.returnPermits(&store.LeaseRequest{Key: []byte(b.key), Params: s.params}, n, ref)
	}
}

// returnGrant returns the whole grant res that answered req (its caller
// gave up on it): the leased permits where they were counted (Ref) and the
// Need part where it was (UsedRef), when the store counted them apart.
func (l *Limiter) returnGrant(req *store.LeaseRequest, res store.LeaseResult) bool {
	if res.UsedRef == 0 {
		return l.returnPermits(req, res.Granted, res.Ref)
	}
	need := min(max(req.Need, 1), res.Granted) // Need defaults to 1
	ok := true
	if rest := res.Granted - need; rest > 0 {
		ok = l.returnPermits(req, rest, res.Ref)
	}
	return l.returnPermits(req, need, res.UsedRef) && ok
}

// returnPermits returns n permits that nobody will use, counted at ref by a lease
// call for req's key and params (its caller gave up, the bucket holds
// another lease, or a later limit refused the request), once; it reports
// whether the store took them. Callers run it in the background.
func (l *Limiter) returnPermits(req *store.LeaseRequest, n, ref int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), l.lateWait())
	defer cancel()
	ret := &store.LeaseRequest{Key: req.Key, Params: req.Params, Return: n, ReturnRef: ref}
	if _, err := l.store.Lease(ctx, ret); err != nil {
		return false
	}
	returnedPermits.Add(int(n))
	return true
}
