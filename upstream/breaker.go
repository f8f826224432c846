package upstream

import (
	"sync"
	"sync/atomic"
)

// breaker is one target's circuit breaker: closed → open after `failures`
// consecutive failures; open → half-open once openFor has passed, when it
// admits up to `trials` requests; half-open → closed when all of them
// succeed, → open again on the first failure.
//
// The closed state, the only one a healthy target is in, costs one atomic
// load per admission and at most one atomic write per result. The other
// states are rare and take mu, which serialises transitions.
type breaker struct {
	state    atomic.Int32
	fails    atomic.Int32 // consecutive failures while closed
	openedAt atomic.Int64 // unix nanoseconds of the last trip

	mu        sync.Mutex
	spell     int64 // number of the current half-open spell, from 1
	admitted  int32 // trial requests let through in this half-open spell
	succeeded int32 // of which succeeded

	failures int32
	openFor  int64
	trials   int32

	// onChange is called, under mu, after each transition.
	onChange func(to int32)
	// mayTrip, when set, is asked (under mu) before the closed breaker
	// opens; false keeps it closed and starts the count again.
	mayTrip func() bool
}

func newBreaker(cfg BreakerConfig, onChange func(to int32)) *breaker {
	return &breaker{
		failures: int32(cfg.Failures),
		openFor:  int64(cfg.OpenFor),
		trials:   int32(cfg.HalfOpenRequests),
		onChange: onChange,
	}
}

// mayAdmit tells, without changing anything, whether admit could succeed at
// now: the balancer uses it to skip targets.
func (b *breaker) mayAdmit(now int64) bool {
	return b.state.Load() != stateOpen || now-b.openedAt.Load() >= b.openFor
}

// admit reports whether a request may go to the target at now. A non-zero
// trial names the half-open spell in which the request is a trial: its result
// decides the breaker's state, and must be passed back to record.
func (b *breaker) admit(now int64) (ok bool, trial int64) {
	if ok, decided := b.admitFast(now); decided {
		return ok, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.admitTrialLocked(now)
}

// admitFast decides without the lock when the state allows it: closed
// admits, open before openFor refuses.
func (b *breaker) admitFast(now int64) (ok, decided bool) {
	switch b.state.Load() {
	case stateClosed:
		return true, true
	case stateOpen:
		if now-b.openedAt.Load() < b.openFor {
			return false, true
		}
	}
	return false, false
}

// admitTrialLocked is admit under mu, where the state may have moved on.
func (b *breaker) admitTrialLocked(now int64) (ok bool, trial int64) {
	if ok, decided := b.admitFast(now); decided {
		return ok, 0
	}
	if b.state.Load() == stateOpen {
		b.spell++
		b.admitted, b.succeeded = 0, 0
		b.setLocked(stateHalfOpen)
	}
	if b.admitted >= b.trials {
		return false, 0
	}
	b.admitted++
	return true, b.spell
}

// record takes the result of a request that admit let through, with the
// trial admit returned. A result only counts in the state it was admitted
// in: closed for non-trials, the same half-open spell for trials.
func (b *breaker) record(failed bool, trial int64, now int64) {
	if trial == 0 {
		if b.state.Load() != stateClosed {
			return
		}
		if !failed {
			if b.fails.Load() != 0 {
				b.fails.Store(0)
			}
			return
		}
		if b.fails.Add(1) < b.failures {
			return
		}
		b.mu.Lock()
		if b.state.Load() == stateClosed {
			if b.mayTrip == nil || b.mayTrip() {
				b.tripLocked(now)
			} else {
				b.fails.Store(0)
			}
		}
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != stateHalfOpen || b.spell != trial {
		return
	}
	if failed {
		b.tripLocked(now)
		return
	}
	b.succeeded++
	if b.succeeded >= b.trials {
		b.fails.Store(0)
		b.setLocked(stateClosed)
	}
}

// cancel hands back a trial whose request gave no verdict (the client
// broke it, or the upstream pushed back): another request may take it.
func (b *breaker) cancel(trial int64) {
	if trial == 0 {
		return
	}
	b.mu.Lock()
	if b.state.Load() == stateHalfOpen && b.spell == trial && b.admitted > 0 {
		b.admitted--
	}
	b.mu.Unlock()
}

func (b *breaker) tripLocked(now int64) {
	b.openedAt.Store(now)
	b.setLocked(stateOpen)
}

func (b *breaker) setLocked(to int32) {
	b.state.Store(to)
	if b.onChange != nil {
		b.onChange(to)
	}
}
