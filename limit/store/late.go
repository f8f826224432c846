package store

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrNotConnected is the answer of a LateStore before Attach, and of the
// writes of a catalog.Sync still waiting for its Redis (Await): they are
// refused rather than kept in this process only, where the first load from
// Redis would drop them.
var ErrNotConnected = errors.New("limit: redis not connected yet")

// LateStore is the store of a pod whose Redis did not answer at start.
// Until Attach every call fails at once, so the limiter's breaker opens and
// limits.on_store_failure decides, as during any outage; from Attach on it
// passes every call to the attached store, with that store's nodes (a
// cluster keeps its per-node breakers). Limiters built over it keep their
// buckets across the attach, so the permits they used while deciding
// alone are reported to the store like after any outage.
type LateStore struct {
	cur atomic.Pointer[Store]
}

var (
	_ Store   = (*LateStore)(nil)
	_ NodeMap = (*LateStore)(nil)
)

// NewLateStore returns a store that is not connected yet.
func NewLateStore() *LateStore { return &LateStore{} }

// Attach makes st the store that answers from now on. Call it once.
func (s *LateStore) Attach(st Store) { s.cur.Store(&st) }

// Attached reports whether Attach was called.
func (s *LateStore) Attached() bool { return s.cur.Load() != nil }

// Lease implements Store.
func (s *LateStore) Lease(ctx context.Context, req *LeaseRequest) (LeaseResult, error) {
	st := s.cur.Load()
	if st == nil {
		return LeaseResult{}, ErrNotConnected
	}
	return (*st).Lease(ctx, req)
}

// Ping implements Store.
func (s *LateStore) Ping(ctx context.Context) error {
	st := s.cur.Load()
	if st == nil {
		return ErrNotConnected
	}
	return (*st).Ping(ctx)
}

// Close closes the attached store, if any.
func (s *LateStore) Close() {
	if st := s.cur.Load(); st != nil {
		(*st).Close()
	}
}

func (s *LateStore) NodeOf(key []byte) int {
	if st := s.cur.Load(); st != nil {
		if n, ok := (*st).(NodeMap); ok {
			return n.NodeOf(key)
		}
	}
	return 0
}

func (s *LateStore) NodeName(i int) string {
	if st := s.cur.Load(); st != nil {
		if n, ok := (*st).(NodeMap); ok {
			return n.NodeName(i)
		}
	}
	return ""
}
