package store

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/cespare/xxhash/v2"
)

// maxOverflowEntries bounds the overflow table: one entry per scope and
// limit in use while the store is full, so a few per configured limit.
const maxOverflowEntries = 4096

// overflowTable decides the new keys that a full MemoryStore has no room
// for. All new keys of one scope (the key's first part: tenant, key, ip,
// rule) and one limit (its Params) share one entry, so that a flood of
// distinct keys gets at most one limit between them, while every key the
// store already holds keeps its own counts. A shared entry grants exactly
// the permits a request needs (no lease beyond them), so nothing is ever
// returned to it, and it ignores returns and re-dates meant for a key's own
// entry. When the table itself is full of live entries, new keys are
// refused.
type overflowTable struct {
	mu      sync.Mutex // protects m and soonest
	m       map[uint64]*memoryEntry
	soonest int64 // at or before the earliest expiry in m
}

var (
	overflowGranted = metrics.NewCounter(`sentinel_limit_memory_overflow_decisions_total{result="granted"}`)
	overflowDenied  = metrics.NewCounter(`sentinel_limit_memory_overflow_decisions_total{result="denied"}`)
	overflowRefused = metrics.NewCounter(`sentinel_limit_memory_overflow_decisions_total{result="table_full"}`)
)

// overflowRetryMS is the retry-after of a refusal for want of room.
const overflowRetryMS = 1000

// lease decides req on its scope's shared entry.
func (t *overflowTable) lease(now int64, req *LeaseRequest) LeaseResult {
	id := overflowID(req)
	t.mu.Lock()
	e := t.entry(id, req.Params.Algorithm, now)
	if e == nil {
		t.mu.Unlock()
		overflowRefused.Inc()
		return LeaseResult{RetryAfter: fromMS(overflowRetryMS), Reset: fromMS(overflowRetryMS)}
	}
	q := newLeaseQuery(req)
	if !req.IsLook() {
		q.want = q.need
	}
	q.ret, q.retRef, q.used = 0, 0, 0
	// No request ID: the entry is shared, so an ID seen on one key must not
	// spare the count of another.
	a := e.leaseQuery(now, req, &q, nil)
	e.expireAt = now + a.keepMS
	t.soonest = min(t.soonest, e.expireAt)
	t.mu.Unlock()
	if a.granted > 0 {
		overflowGranted.Inc()
	} else {
		overflowDenied.Inc()
	}
	return a.resultFor(req)
}

// entry finds or makes the shared entry id; nil when the table is full of
// live entries.
func (t *overflowTable) entry(id uint64, alg Algorithm, now int64) *memoryEntry {
	e := t.m[id]
	if e != nil && e.alg == alg && e.expireAt > now {
		return e
	}
	if e == nil {
		if len(t.m) >= maxOverflowEntries {
			if t.dropExpired(now); len(t.m) >= maxOverflowEntries {
				return nil
			}
		}
		e = &memoryEntry{}
		t.m[id] = e
	}
	*e = memoryEntry{alg: alg}
	return e
}

func (t *overflowTable) dropExpired(now int64) {
	if now < t.soonest {
		return
	}
	soonest := int64(math.MaxInt64)
	for id, e := range t.m {
		if e.expireAt <= now {
			delete(t.m, id)
			continue
		}
		soonest = min(soonest, e.expireAt)
	}
	t.soonest = soonest
}

func (t *overflowTable) sweep(now int64) {
	t.mu.Lock()
	t.dropExpired(now)
	t.mu.Unlock()
}

func (t *overflowTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// overflowID names the shared entry of req's scope and limit. Two limits
// whose names collide share an entry, which can only refuse sooner.
func overflowID(req *LeaseRequest) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write(keyScope(req.Key))
	var b [40]byte
	p := &req.Params
	binary.LittleEndian.PutUint64(b[0:], uint64(p.Algorithm)|uint64(p.Period)<<8)
	binary.LittleEndian.PutUint64(b[8:], uint64(p.Limit))
	binary.LittleEndian.PutUint64(b[16:], uint64(p.Window))
	binary.LittleEndian.PutUint64(b[24:], uint64(p.Capacity))
	binary.LittleEndian.PutUint64(b[32:], math.Float64bits(p.RefillRate))
	_, _ = d.Write(b[:])
	if p.Zone != nil {
		// Quotas of two zones count different periods: sharing an entry,
		// each would restart the other's count at its own boundaries.
		_, _ = d.WriteString(p.Zone.String())
	}
	return d.Sum64()
}

// keyScope returns the scope of a key built by AppendKey (the part of the
// hash tag before its first ':'), or the whole key when it has no tag.
func keyScope(key []byte) []byte {
	i := 0
	for i < len(key) && key[i] != '{' {
		i++
	}
	if i == len(key) {
		return key
	}
	j := i + 1
	for j < len(key) && key[j] != ':' && key[j] != '}' {
		j++
	}
	return key[i+1 : j]
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
