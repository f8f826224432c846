package upstream

import "sync/atomic"

// removal caps how many of a pool's targets passive ejection and breakers
// may hold out of rotation at once (max_ejection_percent), so that the
// failures of a few requests can never take away the pool's last capacity.
// Active health checks are not capped: when they fail every target, the
// pool's panic mode balances over all of them.
type removal struct {
	out atomic.Int32 // targets held out now
	max int32
}

// maxRemoved is how many of n targets may be held out at percent: at most
// n−1, so that one target always stays (none of a single-target pool).
func maxRemoved(n, percent int) int32 {
	return int32(min(n*percent/100, n-1))
}

func (r *removal) take() bool {
	for {
		n := r.out.Load()
		if n >= r.max {
			return false
		}
		if r.out.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (r *removal) give() { r.out.Add(-1) }

// Reasons a target is held out; one target takes one slot of the pool's
// removal, whatever the number of reasons.
const (
	outEjected int32 = 1 << iota
	outBreaker
)

// takeOut marks t held out for reason, taking a slot of the pool's removal
// when it is the first reason. It reports false when the cap refuses.
func (t *target) takeOut(reason int32) bool {
	for {
		old := t.outReasons.Load()
		if old&reason != 0 {
			return true
		}
		if old == 0 && !t.removal.take() {
			t.m.removalRefused.Inc()
			return false
		}
		if t.outReasons.CompareAndSwap(old, old|reason) {
			return true
		}
		if old == 0 {
			t.removal.give()
		}
	}
}

// putBack clears reason, giving the pool's slot back with the last reason.
func (t *target) putBack(reason int32) {
	for {
		old := t.outReasons.Load()
		if old&reason == 0 {
			return
		}
		if t.outReasons.CompareAndSwap(old, old&^reason) {
			if old == reason {
				t.removal.give()
			}
			return
		}
	}
}
