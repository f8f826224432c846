package policy

import "sync/atomic"

// Live holds policies that change while limiters decide with them: the
// admin API's policies over the file's. A limiter built with Live.Set
// reads the set last stored at each decision (one atomic load), so that a
// change applies from the next request without a new limiter.
type Live struct {
	cur  atomic.Pointer[Set]
	view Set
}

// NewLive returns a Live that holds no policies.
func NewLive() *Live {
	l := &Live{}
	l.view.live = &l.cur
	return l
}

// Store makes ps the policies that apply (nil: none) and releases the set
// it replaces, whose policies' metric series go unless ps has them too.
// ps must not be a live set, nor be stored in another Live.
func (l *Live) Store(ps *Set) {
	if old := l.cur.Swap(ps); old != ps {
		old.Release()
	}
}

// Set returns the live set: a Set whose methods answer with the policies
// stored last.
func (l *Live) Set() *Set { return &l.view }
