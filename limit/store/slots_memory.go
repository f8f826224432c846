package store

import (
	"context"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// slotsState is one key's concurrency slots in a MemoryStore: the live
// leases, one per pod (a slice: a key has a few pods, and a scan of them is
// what the script does too).
type slotsState struct {
	leases []slotLease
}

// slotLease is one pod's lease: count slots until expiry (ms).
type slotLease struct {
	pod           string
	count, expiry int64
}

// slotsQuery is a SlotRequest in the script's integers.
type slotsQuery struct {
	pod                             string
	limit, release, want, need, ttl int64
}

// slotsEntry is the algorithm of a slots entry: none, which no lease has
// (checkLease refuses it), so an entry never changes kind under its key.
const slotsEntry Algorithm = 0

// Slots runs req under the lock of the key's shard, with the store's clock.
// The key's entry (its key with suffixSlots, as in Redis) lives until its
// latest lease expires (the Redis key a second more), and goes at once when
// no lease is left. A full
// store makes room for a new one as for a lease's key (makeRoom): an entry
// whose slots are all taken is never evicted, while evicting one with free
// slots forgets its leases, which may let that key's pods take as many
// slots again; a new key that finds no room fails with ErrNoRoom. A call
// that takes nothing on a key the store does not hold makes no entry.
func (s *MemoryStore) Slots(ctx context.Context, req *SlotRequest) (SlotResult, error) {
	if err := checkSlots(req); err != nil {
		return SlotResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return SlotResult{}, err
	}
	var buf [128]byte
	key := append(append(buf[:0], req.Key...), suffixSlots...)
	now := s.now().UnixMilli()
	sh := &s.shards[xxhash.Sum64(key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[string(key)]; req.Want == 0 && (e == nil || e.alg() != slotsEntry || e.expireAt <= now) {
		return SlotResult{}, nil // nothing held, nothing taken
	}
	e := sh.entry(key, "", slotsEntry, now, int(s.perShard.Load()), s.evictions)
	if e == nil {
		return SlotResult{}, ErrNoRoom
	}
	st := stateOf[slotsState](e)
	q := slotsQuery{pod: req.Pod, limit: req.Limit, release: req.Release, want: req.Want, need: req.need(), ttl: ceilMS(req.TTL)}
	a, latest := st.run(now, &q)
	if len(st.leases) == 0 {
		delete(sh.m, string(key))
		return a.result(), nil
	}
	e.expireAt = latest
	e.left, e.full, e.wholeAt = max(q.limit-a.inUse, 0), q.limit, latest
	sh.soonest = min(sh.soonest, e.expireAt)
	return a.result(), nil
}

// run is lua/slots.lua: it drops the expired leases, applies q and answers,
// with the latest expiry of the leases left (0 when none).
func (st *slotsState) run(now int64, q *slotsQuery) (a slotsAnswer, latest int64) {
	var others, soonest int64
	held, mine := int64(0), -1
	live := st.leases[:0]
	for _, l := range st.leases {
		switch {
		case l.expiry <= now:
			continue
		case l.pod == q.pod:
			held, mine = l.count, len(live)
		default:
			others += l.count
			if soonest == 0 || l.expiry < soonest {
				soonest = l.expiry
			}
			latest = max(latest, l.expiry)
		}
		live = append(live, l)
	}
	clear(st.leases[len(live):]) // let the dropped pods' names go
	st.leases = live

	held -= min(q.release, held)
	granted := min(q.want, q.limit-others-held)
	if granted < q.need {
		granted = 0
	}
	held += granted
	if held > 0 {
		latest = max(latest, now+q.ttl)
	}
	st.set(mine, q.pod, held, now+q.ttl)
	a = slotsAnswer{granted: granted, held: held, inUse: others + held}
	if granted < q.need && soonest > 0 {
		a.freeMS = soonest - now
	}
	return a, latest
}

// set writes the pod's lease at index mine (-1: it has none): count slots
// until expiry, or no lease when count is 0.
func (st *slotsState) set(mine int, pod string, count, expiry int64) {
	switch {
	case count > 0 && mine >= 0:
		st.leases[mine].count, st.leases[mine].expiry = count, expiry
	case count > 0:
		// The caller's string may be a view of its buffer: keep a copy.
		st.leases = append(st.leases, slotLease{pod: strings.Clone(pod), count: count, expiry: expiry})
	case mine >= 0:
		last := len(st.leases) - 1
		st.leases[mine] = st.leases[last]
		st.leases[last] = slotLease{}
		st.leases = st.leases[:last]
	}
}
