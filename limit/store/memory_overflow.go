package store

import (
	"math"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// A full shard of a MemoryStore makes room for a new key by evicting one of
// its keys (makeRoom); no new key is ever decided on a budget that other
// keys have spent. What an attacker who sends many distinct keys can do
// with each choice:
//
//   - A key whose budget is whole again (every counted permit has left the
//     window, a token bucket refilled) is evicted first: nothing is lost.
//   - Else the least used of a sample of keys that are not exhausted is
//     evicted, and of those used alike the one whose budget is whole
//     soonest (used least recently): it forgets what it had used, so that
//     key may take that many permits more within the window. A flood's
//     keys have used little, so they go first; a key that forgets its
//     counts gets no more than a new key would, which the attacker can mint
//     at will anyway. A key in use that has used as little as a flood's
//     key (its first permit of a window) is younger than the flood's older
//     keys, which go before it.
//   - An exhausted key (its last answer left no budget) is never evicted:
//     a flood cannot free a client that used up its limit. When a sample
//     holds only exhausted keys, the shard grows, up to twice its share of
//     MaxKeys: filling that takes the limit's worth of requests for each
//     key, twice max_keys times per window.
//   - Past that, a new key finds no room: the store refuses it for a
//     second (LeaseResult.NoRoom), charged to no budget, and retries find
//     room as soon as a key's budget is whole again or expires. A fresh
//     budget that is not kept would disable the limit for every key that
//     came after, so the store refuses instead.
//
// The limiter's local share (RoleLocalShare) counts each key against this
// pod's share of its limit, which one permit can use up on many pods: it
// keeps no key for being exhausted, so it never grows past MaxKeys nor
// refuses for want of room, and a key it drops under a flood may get its
// share again should the store then fail (a key the store said was spent
// stays refused by its local bucket, which is kept).

// evictSample is how many keys of a full shard are looked at for one to
// evict: map order is random, so the sample is too.
const evictSample = 16

// noRoomRetryMS is the retry-after of a refusal for want of room.
const noRoomRetryMS = 1000

// memoryRoles name the tables a MemoryStore keeps, for the metrics: the
// store of a gateway without Redis, or a limiter's local share.
var memoryRoles = [...]string{RoleStore: "store", RoleLocalShare: "local_share"}

// MemoryRole tells what a MemoryStore is used for, for its metrics.
type MemoryRole uint8

// The roles of a MemoryStore.
const (
	RoleStore      MemoryRole = iota // the store of a gateway without Redis
	RoleLocalShare                   // a limiter's per-pod share of each limit
)

// memoryEvictions are how a role's full table makes room, and its metrics.
type memoryEvictions struct {
	keepExhausted                 bool
	whole, partial, grown, noRoom *metrics.Counter
}

var evictionsByRole = func() (m [len(memoryRoles)]memoryEvictions) {
	for i, role := range memoryRoles {
		m[i] = memoryEvictions{
			keepExhausted: MemoryRole(i) == RoleStore,
			whole:         metrics.NewCounter(`sentinel_limit_memory_evictions_total{table="` + role + `",kind="whole"}`),
			partial:       metrics.NewCounter(`sentinel_limit_memory_evictions_total{table="` + role + `",kind="partial"}`),
			grown:         metrics.NewCounter(`sentinel_limit_memory_unevictable_total{table="` + role + `",result="grown"}`),
			noRoom:        metrics.NewCounter(`sentinel_limit_memory_unevictable_total{table="` + role + `",result="no_room"}`),
		}
	}
	return m
}()

// makeRoom makes room in the full shard (it holds limit keys or more) for
// one new key, as the comment above says, and reports whether there is
// room. The caller holds sh.mu.
func (sh *memoryShard) makeRoom(now int64, limit int, ev *memoryEvictions) bool {
	if sh.dropExpired(now); len(sh.m) < limit {
		return true
	}
	var victim string
	found, least, soonest, seen := false, int64(math.MaxInt64), int64(math.MaxInt64), 0
	for k, e := range sh.m {
		if seen++; seen > evictSample {
			break
		}
		if e.wholeAt <= now {
			delete(sh.m, k)
			ev.whole.Inc()
			return true
		}
		used := e.full - e.left
		if (e.left >= 1 || !ev.keepExhausted) && (used < least || used == least && e.wholeAt < soonest) {
			victim, least, soonest, found = k, used, e.wholeAt, true
		}
	}
	if found {
		delete(sh.m, victim)
		ev.partial.Inc()
		return true
	}
	if len(sh.m) < 2*limit {
		ev.grown.Inc()
		return true
	}
	ev.noRoom.Inc()
	return false
}

// noRoom is the answer to a new key that a full store has no room for.
func noRoom() LeaseResult {
	return LeaseResult{RetryAfter: fromMS(noRoomRetryMS), Reset: fromMS(noRoomRetryMS), NoRoom: true}
}

// keep notes what the entry's last answer to req left, for makeRoom: the
// budget left, the whole budget, and when it is whole again (ms).
func (e *memoryEntry) keep(now int64, req *LeaseRequest, a *leaseAnswer) {
	p := &req.Params
	e.left, e.full = a.remaining, p.Limit
	if p.Algorithm == TokenBucket {
		e.full = p.Capacity
	}
	e.wholeAt = math.MaxInt64
	if a.resetMS >= 0 {
		e.wholeAt = now + a.resetMS
	}
}

// memoryStores holds the MemoryStores of the process for the keys gauge.
var memoryStores sync.Map // *MemoryStore → struct{}

var _ = metrics.NewGauge(`sentinel_limit_memory_keys`, func() float64 {
	n := 0
	memoryStores.Range(func(k, _ any) bool {
		n += k.(*MemoryStore).Len()
		return true
	})
	return float64(n)
})
