package upstream

import (
	"reflect"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Update is a staged change of a Set's pools, built by Stage: the pools of
// the new configuration, where a pool whose configuration did not change
// is the running one (its health state, breakers and connections kept) and
// every other is new. Nothing changes for requests until Commit; Abort
// drops it. One Update at a time: the caller serializes Stage, Commit and
// Abort (a reload holds its lock through all three).
type Update struct {
	s       *Set
	members map[string]*member
	names   []string
	fresh   []*member // built for this update
	// Kept, Added, Replaced and Removed name the pools by what the update
	// does to them, each sorted.
	Kept, Added, Replaced, Removed []string
}

// Stage builds the pools that cfg, a provisioned section
// (Config.SetDefaults, Config.Validate), adds or changes; nothing runs for
// them yet, and nothing changes until Commit.
func (s *Set) Stage(cfg Config) (*Update, error) {
	c := clone(cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	u := &Update{s: s, members: make(map[string]*member, len(c)), names: sortedNames(c)}
	for _, name := range u.names {
		old := s.members[name]
		switch {
		case old != nil && reflect.DeepEqual(old.cfg, c[name]):
			u.members[name] = old
			u.Kept = append(u.Kept, name)
			continue
		case old != nil:
			u.Replaced = append(u.Replaced, name)
		default:
			u.Added = append(u.Added, name)
		}
		m := &member{pool: newPool(name, c[name]), cfg: c[name]}
		u.members[name], u.fresh = m, append(u.fresh, m)
	}
	for _, name := range s.names {
		if u.members[name] == nil {
			u.Removed = append(u.Removed, name)
		}
	}
	s.staged = u.fresh
	return u, nil
}

// Pool returns the update's pool called name, or nil.
func (u *Update) Pool(name string) *Pool {
	if m := u.members[name]; m != nil {
		return m.pool
	}
	return nil
}

// Changed reports whether the update adds, replaces or removes a pool.
func (u *Update) Changed() bool {
	return len(u.Added)+len(u.Replaced)+len(u.Removed) > 0
}

// Commit makes the update's pools the Set's, starts the new pools' health
// checks when the Set runs, and retires the pools it replaced or removed
// (see retire). Call it once the requests no longer pick pools from the
// old set (the proxy's new route table is published).
func (u *Update) Commit() {
	s := u.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var old []*member
	for name, m := range s.members {
		if u.members[name] != m {
			old = append(old, m)
		}
	}
	s.members, s.names, s.staged = u.members, u.names, nil
	if s.ctx != nil && !s.stopped {
		for _, m := range u.fresh {
			m.watch(s.ctx)
		}
	}
	if len(old) > 0 {
		s.retiring.Go(func() { s.retire(old) })
	}
}

// Abort drops the update: the series its new pools created and no running
// pool uses are unregistered.
func (u *Update) Abort() {
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	u.s.staged = nil
	u.s.unregisterUnused(u.fresh)
}

// retire closes pools that a reload replaced or removed once the requests
// in them have finished. In-flight requests are not counted per request
// (that would cost the request path a shared atomic): after the grace,
// within which every request that took a pool from the old route table has
// entered it, the pool's own count of requests in flight (Pending) must
// reach 0, which it does within the pool timeout. Then its health checks
// stop, its idle connections close and its series that no running pool
// shares are unregistered. A late request still works: the pool dials
// again, and that connection closes after max_idle_conn_duration. Stop
// ends the wait at once.
func (s *Set) retire(old []*member) {
	s.sleep(s.retireGrace)
	start := time.Now()
	for _, m := range old {
		deadline := start.Add(m.pool.timeout)
		for m.pool.Pending() > 0 && time.Now().Before(deadline) && s.sleep(10*time.Millisecond) {
		}
		m.close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unregisterUnused(old)
}

// sleep waits d and reports true, or reports false at once when the Set
// is stopped.
func (s *Set) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// unregisterUnused unregisters the series of gone that no running or
// staged pool uses (s.mu held): a pool replaced under the same name keeps
// the series of its targets that it still has.
func (s *Set) unregisterUnused(gone []*member) {
	inUse := make(map[string]bool)
	for _, m := range s.members {
		for _, n := range m.pool.seriesNames() {
			inUse[n] = true
		}
	}
	for _, m := range s.staged {
		for _, n := range m.pool.seriesNames() {
			inUse[n] = true
		}
	}
	for _, m := range gone {
		for _, n := range m.pool.seriesNames() {
			if !inUse[n] {
				metrics.UnregisterMetric(n)
			}
		}
	}
}
