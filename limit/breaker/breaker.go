// Package breaker is the limiter's store breaker: it stops calls to a store
// node after consecutive failures, so that a dead node costs no
// per-request timeouts.
package breaker

import (
	"sync/atomic"
	"time"
)

// Breaker states, the values of sentinel_limit_breaker_state.
const (
	Closed   int32 = 0
	HalfOpen int32 = 1
	Open     int32 = 2
)

// Breaker opens after Failures consecutive failures. After the Cooldown one
// probe call goes through (half-open); its success closes the breaker, its
// failure opens it again. All fields are atomics: the request path never
// locks here.
type Breaker struct {
	Failures int64         // consecutive failures that open the breaker
	Cooldown time.Duration // open → half-open
	OnChange func(to int32)
	state    atomic.Int32
	fails    atomic.Int64 // consecutive failures while closed
	openedAt atomic.Int64 // unix nanos of the last opening
}

// State is the breaker's state: Closed, HalfOpen or Open.
func (b *Breaker) State() int32 { return b.state.Load() }

// Allow reports whether a store call may be made now. probe is set for the
// one half-open call that decides whether the breaker closes.
func (b *Breaker) Allow(now int64) (ok, probe bool) {
	switch b.state.Load() {
	case Closed:
		return true, false
	case Open:
		if now-b.openedAt.Load() < int64(b.Cooldown) {
			return false, false
		}
		if b.state.CompareAndSwap(Open, HalfOpen) {
			b.changed(HalfOpen)
			return true, true
		}
		return false, false
	default: // half-open: the probe is in flight
		return false, false
	}
}

// Success records a store call that answered.
func (b *Breaker) Success(probe bool) {
	b.fails.Store(0)
	if probe || b.state.Load() != Closed {
		if b.state.Swap(Closed) != Closed {
			b.changed(Closed)
		}
	}
}

// Failure records a store call that failed or timed out.
func (b *Breaker) Failure(probe bool, now int64) {
	if probe {
		b.openedAt.Store(now)
		b.state.Store(Open)
		b.changed(Open)
		return
	}
	if b.fails.Add(1) >= b.Failures && b.state.CompareAndSwap(Closed, Open) {
		b.openedAt.Store(now)
		b.changed(Open)
	}
}

// Answered records a store call that the store ran in time but whose
// answer came after its caller had stopped waiting (its failure was
// already recorded): the store is up, the answer was slow on its way back.
// It ends the run of consecutive failures; a breaker already open stays
// open until its probe (the store's state after the failures that opened
// it, a failover for one, is the probe's to find).
func (b *Breaker) Answered() { b.fails.Store(0) }

// probeNow ends an open breaker's cooldown: its next Allow probes.
func (b *Breaker) probeNow() {
	if b.state.Load() == Open {
		b.openedAt.Store(0)
	}
}

func (b *Breaker) changed(to int32) {
	if b.OnChange != nil {
		b.OnChange(to)
	}
}

// StateName is the name of a state, as GET /v1/state shows it.
func StateName(s int32) string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "closed"
}
