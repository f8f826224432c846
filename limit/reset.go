package limit

import (
	"context"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Reset makes key's budget whole again: the store drops its counts (p
// names a quota's period), then this pod forgets what it holds for the key
// (the other pods do when they hear of the reset).
func (l *Limiter) Reset(ctx context.Context, key []byte, p store.Params) error {
	if err := l.store.Reset(ctx, key, p); err != nil {
		return err
	}
	l.Forget(key)
	return nil
}

// Forget drops what this pod holds for key (leased permits, a cached
// refusal, reports due, the local share's counts): the store reset it.
func (l *Limiter) Forget(key []byte) {
	if b := l.table.find(key, true); b != nil {
		b.mu.Lock()
		b.permits, b.deniedUntil, b.gen = 0, 0, b.gen+1
		b.mu.Unlock()
	}
	_ = l.fallback.Reset(context.Background(), key, store.Params{})
}

// PolicyKey appends the store key of limit i of policy p, one of the
// `policies` section (Set.Lookup's), for the budget of identity id
// (AppendIdentity's or AppendIdentityOf's), as the limiter builds it:
// {pol:<name>:<limit label>:<identity>} (Compiled.AppendKey).
func PolicyKey(dst []byte, p *catalog.CompiledPolicy, i int, id []byte) []byte {
	return p.AppendKey(dst, i, id, nil)
}
