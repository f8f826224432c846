package limit

import (
	"context"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// refund puts the permits taken from earlier limits back into their local
// buckets when a later limit rejects the request: they stay usable until
// their lease expires. Permits of a lease the bucket has since replaced are
// not put into the new one (they were counted elsewhere). Permits that the
// store counted as used at once (the Need part of a lease call) go back to
// the store, in the background: the refusing limit's store call came first,
// so this is not on the local fast path.
func (l *Limiter) refund(taken []taking, specs []spec, tokens int64) {
	if len(taken) == 0 { // the first limit refused: nothing taken (and no clock read)
		return
	}
	now := l.now().UnixNano()
	for i, tk := range taken {
		b := tk.b
		if b == nil {
			continue
		}
		if tk.usedRef != 0 {
			req := &store.LeaseRequest{Key: []byte(b.key), Params: specs[i].params}
			if l.shared {
				go l.giveBack(req, tokens, tk.usedRef)
			} else {
				l.giveBack(req, tokens, tk.usedRef)
			}
			continue
		}
		b.mu.Lock()
		if b.gen == tk.gen && now < b.expires {
			b.permits += tokens
		}
		b.mu.Unlock()
	}
}

// giveBackGrant returns the whole grant res that answered req (its caller
// gave up on it): the leased permits where they were counted (Ref) and the
// Need part where it was (UsedRef), when the store counted them apart.
func (l *Limiter) giveBackGrant(req *store.LeaseRequest, res store.LeaseResult) bool {
	if res.UsedRef == 0 {
		return l.giveBack(req, res.Granted, res.Ref)
	}
	need := min(max(req.Need, 1), res.Granted) // Need defaults to 1
	ok := true
	if rest := res.Granted - need; rest > 0 {
		ok = l.giveBack(req, rest, res.Ref)
	}
	return l.giveBack(req, need, res.UsedRef) && ok
}

// giveBack returns n permits that nobody will use, counted at ref by a lease
// call for req's key and params (its caller gave up, the bucket holds
// another lease, or a later limit refused the request), once; it reports
// whether the store took them. Callers run it in the background.
func (l *Limiter) giveBack(req *store.LeaseRequest, n, ref int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), l.lateWait())
	defer cancel()
	ret := &store.LeaseRequest{Key: req.Key, Params: req.Params, Return: n, ReturnRef: ref}
	if _, err := l.store.Lease(ctx, ret); err != nil {
		return false
	}
	returnedPermits.Add(int(n))
	return true
}
