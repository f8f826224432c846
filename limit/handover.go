package limit

import (
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// kept is what a limiter knows of its keys beyond its configuration: the
// buckets (leases, the permits let through alone and not yet reported with
// their times, the store's last answers) and the local share's counts. A
// limiter built to replace another (Options.Succeeds, a reload) shares its
// predecessor's, so that a reload forgets nothing, whether or not the store
// answers at that moment: a new limiter that started empty during an outage
// let each pod grant its whole share again on top of what it had granted,
// and dropped the unreported permits, which the store then never counted.
// The last limiter that holds them closes them.
type kept struct {
	refs     atomic.Int32
	table    *bucketTable
	fallback *store.MemoryStore
	waits    *waits // the requests waiting (max_wait), whichever limiter they wait in
	// slotOwner names this pod's slot leases in the store (newSlotOwner).
	slotOwner string
	// firstUses count the keys' uses of this pod's reserved permits lately.
	firstUses *firstUses
	// shareKinds number the share kinds that the buckets' share counts
	// name (see holdShare).
	shareKinds shareKinds
}

// newKept returns fresh state for a limiter of cfg.
func newKept(cfg *Config, opts *Options) *kept {
	k := &kept{table: newBucketTable(cfg.MaxKeys),
		fallback:  store.NewMemoryStore(store.MemoryOptions{MaxKeys: cfg.MaxKeys, Now: opts.Now, Role: store.RoleLocalShare}),
		waits:     &waits{queues: xsync.NewMap[string, *waitQueue](), perKey: cfg.WaitQueuePerKey, maximum: cfg.WaitQueue},
		slotOwner: newSlotOwner(), firstUses: newFirstUses()}
	// A second, the longest shareSlack: dated later, a permit counts longer, never shorter.
	k.table.spill = func(b *bucket, now int64) { k.spillShare(b, now, time.Second) }
	k.refs.Store(1)
	return k
}

// succeed makes l go on from prev's state: it shares prev's kept state,
// sized to l's limits.max_keys, starts its breakers in the states of prev's
// (an open breaker stays open: the outage goes on) and its store round trip
// from prev's. Each bucket's unused leased permits end (the next call
// returns them) and its cached refusal is dropped, so that a changed limit
// applies to the next request; nothing that still counts is dropped.
func (l *Limiter) succeed(prev *Limiter) {
	prev.kept.refs.Add(1)
	l.kept = prev.kept
	l.table, l.fallback, l.waits = l.kept.table, l.kept.fallback, l.kept.waits
	l.table.setMaxKeys(l.cfg.MaxKeys)
	l.fallback.SetMaxKeys(l.cfg.MaxKeys)
	l.breakers.CopyStates(prev.breakers)
	l.rtt.Store(prev.rtt.Load())
	l.table.each(func(b *bucket) {
		b.mu.Lock()
		b.expired += b.permits
		b.permits = 0
		b.forgetRefusal()
		b.mu.Unlock()
	})
}

// release gives up l's hold on its kept state, closing it when l was the
// last limiter to hold it.
func (l *Limiter) release() {
	if l.kept.refs.Add(-1) == 0 {
		l.fallback.Close()
	}
}
