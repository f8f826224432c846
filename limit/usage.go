package limit

import (
	"context"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Usage answers what the budget of key under p (a policy limit's store key
// and parameters, see PolicyKey) has left, without taking anything: a look
// of the store, as a Peek's, plus the permits this pod holds leased for it
// (other pods' unused leases count as used). Limit and Window are p's;
// Remaining is 0 when the budget is spent or overdrawn. It fails when the
// store cannot answer.
func (l *Limiter) Usage(ctx context.Context, key []byte, p store.Params) (Applied, error) {
	s := &spec{params: p}
	s.setKey(append(s.buf[:0], key...))
	l.finish(s, &Request{})
	v := l.look(ctx, s, 1)
	if v.Unavailable {
		return Applied{}, ErrStoreUnavailable
	}
	return Applied{Limit: v.Limit, Remaining: max(v.Remaining, 0), Reset: v.Reset, Window: v.Window}, nil
}
