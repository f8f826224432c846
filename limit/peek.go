package limit

import (
	"bytes"
	"context"
	"math"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// peek answers a Peek request from a look of each limit's store, which
// counts nothing: permits taken and given back would be held for a round
// trip, and refuse another pod's request at the edge of the budget
// meanwhile. It answers the first refusing limit (not in shadow mode), else
// the one with the least remaining; a store that cannot answer makes it
// Unavailable (the failure policy decides requests, not what a budget is).
func (l *Limiter) peek(ctx context.Context, specs []spec, tokens int64) Decision {
	var applied Decision
	best := verdict{Allowed: true, Remaining: math.MaxInt64}
	shadowed := false
	for i := range specs {
		d := l.look(ctx, &specs[i], tokens)
		applied.note(&d)
		if d.Unavailable {
			best = d
			break
		}
		if !d.Allowed && (specs[i].shadow || l.cfg.Shadow) {
			d.Allowed, d.RetryAfter, shadowed = true, 0, true
		}
		if best.Allowed && (!d.Allowed || d.Remaining < best.Remaining) {
			best = d
		}
	}
	if len(specs) == 0 {
		best.Remaining = 0
	}
	best.Shadowed = shadowed && best.Allowed
	applied.answer(&best)
	return applied
}

// look answers one limit: its remaining budget is the store's plus the
// permits this pod holds leased (counted as taken in the store; other
// pods' leases stay unknown). The key is cloned: a store call may outlive
// the spec.
func (l *Limiter) look(ctx context.Context, s *spec, tokens int64) verdict {
	if s.meter != nil && s.meter.Slots > 0 {
		return l.lookSlots(ctx, s)
	}
	if tokens > s.most {
		return s.overMost()
	}
	res, _, err := l.lease(ctx, s, &store.LeaseRequest{Key: bytes.Clone(s.key()), Need: tokens}, nil, 0, false)
	if err != nil {
		return verdict{Unavailable: true, Scope: s.scope, Name: s.name, Limit: s.limit, RetryAfter: l.cfg.BreakerCooldown}
	}
	var held int64
	if b := l.table.find(s.key(), false); b != nil {
		b.mu.Lock()
		if l.now().UnixNano() < b.expires {
			held = b.permits
		}
		b.mu.Unlock()
	}
	if held >= tokens || res.Remaining >= tokens {
		res.RetryAfter = 0
	}
	return s.decision(res.RetryAfter == 0, res.Remaining+held, res.RetryAfter, int64(res.Reset))
}

// lookSlots answers a concurrency limit: whether a slot is free now, and
// how many are.
func (l *Limiter) lookSlots(ctx context.Context, s *spec) verdict {
	inUse, err := l.SlotUsage(ctx, s.key(), s.params.Limit)
	if err != nil {
		return verdict{Unavailable: true, Scope: s.scope, Name: s.name, Limit: s.limit, RetryAfter: l.cfg.BreakerCooldown}
	}
	free := max(s.params.Limit-inUse, 0)
	retry := time.Duration(0)
	if free == 0 {
		retry = slotRetry
	}
	return s.decision(free > 0, free, retry, 0)
}
