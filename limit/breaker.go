package limit

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Store breaker states, the values of sentinel_limit_breaker_state.
const (
	breakerClosed   int32 = 0
	breakerHalfOpen int32 = 1
	breakerOpen     int32 = 2
)

// storeBreaker stops store calls after consecutive failures, so that a dead
// store costs no per-request timeouts. After the cooldown one probe call goes
// through (half-open); its success closes the breaker, its failure opens it
// again. All fields are atomics: the request path never locks here.
type storeBreaker struct {
	failures int64         // consecutive failures that open the breaker
	cooldown time.Duration // open → half-open
	state    atomic.Int32
	fails    atomic.Int64 // consecutive failures while closed
	openedAt atomic.Int64 // unix nanos of the last opening
	onChange func(to int32)
}

// allow reports whether a store call may be made now. probe is set for the
// one half-open call that decides whether the breaker closes.
func (b *storeBreaker) allow(now int64) (ok, probe bool) {
	switch b.state.Load() {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if now-b.openedAt.Load() < int64(b.cooldown) {
			return false, false
		}
		if b.state.CompareAndSwap(breakerOpen, breakerHalfOpen) {
			b.changed(breakerHalfOpen)
			return true, true
		}
		return false, false
	default: // half-open: the probe is in flight
		return false, false
	}
}

// success records a store call that answered.
func (b *storeBreaker) success(probe bool) {
	b.fails.Store(0)
	if probe || b.state.Load() != breakerClosed {
		if b.state.Swap(breakerClosed) != breakerClosed {
			b.changed(breakerClosed)
		}
	}
}

// failure records a store call that failed or timed out.
func (b *storeBreaker) failure(probe bool, now int64) {
	if probe {
		b.openedAt.Store(now)
		b.state.Store(breakerOpen)
		b.changed(breakerOpen)
		return
	}
	if b.fails.Add(1) >= b.failures && b.state.CompareAndSwap(breakerClosed, breakerOpen) {
		b.openedAt.Store(now)
		b.changed(breakerOpen)
	}
}

func (b *storeBreaker) changed(to int32) {
	if b.onChange != nil {
		b.onChange(to)
	}
}

func breakerStateName(s int32) string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// ErrStoreUnavailable is returned while the store's breaker is open.
var ErrStoreUnavailable = errors.New("limit: store unavailable")

// breakerState is the worst state of the store breakers.
func (l *Limiter) breakerState() int32 {
	st := breakerClosed
	for i := range l.breakers {
		st = max(st, l.breakers[i].state.Load())
	}
	return st
}

// breakerFor returns the breaker of the store node that holds key.
func (l *Limiter) breakerFor(key []byte) *storeBreaker {
	if l.nodes == nil {
		return &l.breakers[0]
	}
	return &l.breakers[min(max(l.nodes.NodeOf(key), 0), store.MaxNodes-1)]
}
