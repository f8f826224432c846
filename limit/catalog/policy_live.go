package catalog

import "sync/atomic"

// LivePolicies holds policies that change while limiters decide with them: the
// admin API's policies over the file's. A limiter built with LivePolicies.Set
// reads the set last stored at each decision (one atomic load), so that a
// change applies from the next request without a new limiter.
type LivePolicies struct {
	cur  atomic.Pointer[PolicySet]
	view PolicySet
}

// NewLivePolicies returns a LivePolicies that holds no policies.
func NewLivePolicies() *LivePolicies {
	l := &LivePolicies{}
	l.view.live = &l.cur
	return l
}

// Store makes ps the policies that apply (nil: none) and releases the set
// it replaces, whose policies' metric series go unless ps has them too.
// ps must not be a live set, nor be stored in another LivePolicies.
func (l *LivePolicies) Store(ps *PolicySet) {
	if old := l.cur.Swap(ps); old != ps {
		old.Release()
	}
}

// Set returns the live set: a PolicySet whose methods answer with the policies
// stored last.
func (l *LivePolicies) Set() *PolicySet { return &l.view }
