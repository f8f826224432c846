package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Concurrency limits (policy limits with `concurrency: N`) count requests
// in flight per key across pods. Each pod holds a lease of the key's slots
// in the store (store.Slots), which counts the live leases of every pod:
// a slot is taken at admission and given back when the exchange ends. A
// pod keeps a slot given back for a moment (slotIdleHold) so that the key's
// next request takes it without a store call, unless the store's last
// answer said every slot was held (another pod may be waiting for one).
// The pod renews its lease every slotRenewEvery; the store drops a lease
// not renewed within SlotLeaseTTL, so the slots of a pod that dies or is
// cut off come back to the others within SlotLeaseTTL.
const (
	// SlotLeaseTTL is how long the store keeps a pod's slots without a
	// call from it.
	SlotLeaseTTL = 5 * time.Second
	// slotRenewEvery is how often a pod renews the leases it holds.
	slotRenewEvery = time.Second
	// slotIdleHold is how long a pod keeps a slot given back unused.
	slotIdleHold = 20 * time.Millisecond
	// slotRetry is a refusal's retry-after when the store cannot say when
	// a slot frees (held by requests of this or a live pod).
	slotRetry = 100 * time.Millisecond
	// slotRefusalHold is how long a pod answers a key whose slots were all
	// held at the store's last answer without asking again (unless one of
	// its own comes back): a client hammering a full key costs the store
	// at most one call per pod every slotRefusalHold.
	slotRefusalHold = 10 * time.Millisecond
)

// slotState is what a pod holds of one key's slots. The bucket's mutex
// guards it.
type slotState struct {
	held    int64 // slots the store counts for this pod's lease
	idle    int64 // of them, not in use
	alone   int64 // slots in use taken on the pod's share while the store failed (not in the store)
	full    bool  // the store's last answer: every slot was held
	idleAt  int64 // unix nanos: when a slot last became idle
	renewed int64 // unix nanos: when the store last renewed the lease
	limit   int64 // N, as last decided
	calls   int   // store calls for the key in flight
	// refusedUntil: the store refused a slot (all held); until then
	// (unix nanos) the pod refuses without a call, unless one of its own
	// slots comes back (slotRefusalHold).
	refusedUntil int64
}

// newSlotOwner names a pod's leases in the store: its host name and a
// number drawn when its limiter state is made (a reload's limiter takes
// over its predecessor's, name included), so that a restarted pod's lease
// is not its predecessor's (which then expires), nor are two gateways' in
// one process the same.
func newSlotOwner() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	return host + "/" + hex.EncodeToString(b[:])
}

// slotKeys are the buckets of keys whose slots this process holds, which
// the slot loop renews and trims; the loop starts with the first slot.
var (
	slotKeys     sync.Map // *bucket → *Limiter (the one that took the slot)
	slotLoopOnce sync.Once
)

var (
	slotStoreCalls  = metrics.NewCounter(`sentinel_limit_slot_store_calls_total`)
	slotLocalTakes  = metrics.NewCounter(`sentinel_limit_slot_local_takes_total`)
	slotAloneTakes  = metrics.NewCounter(`sentinel_limit_slot_alone_total`)
	slotRenewErrors = metrics.NewCounter(`sentinel_limit_slot_renew_errors_total`)
	slotsSquared    = metrics.NewCounter(`sentinel_limit_slots_squared_total`)
)

// slotsOf returns b's slot state, made on first use. The caller holds b.mu.
func (b *bucket) slotsOf() *slotState {
	r := b.rareState()
	if r.slots == nil {
		r.slots = new(slotState)
	}
	return r.slots
}

// takeSlot decides a concurrency limit: a slot of the key, from the pod's
// idle ones, else from the store, else (the store failing) from the pod's
// share of N. Its use holds the bucket; the slot goes back with
// releaseSlot.
func (l *Limiter) takeSlot(ctx context.Context, s *spec, now int64) (verdict, use) {
	b := l.table.get(s.key(), now)
	n := s.params.Limit
	b.mu.Lock()
	st := b.slotsOf()
	st.limit = n
	if st.idle > 0 {
		st.idle--
		inUse := st.held - st.idle + st.alone
		b.mu.Unlock()
		slotLocalTakes.Inc()
		return s.decision(true, max(n-inUse, 0), 0, 0), use{b: b, n: 1, local: true}
	}
	if now < st.refusedUntil {
		retry := time.Duration(st.refusedUntil - now)
		b.mu.Unlock()
		cachedDenials.Inc()
		return s.decision(false, 0, retry, 0), use{}
	}
	st.calls++
	slotKeys.Store(b, l) // under b.mu: tendSlots drops it only with no call in flight
	b.mu.Unlock()
	slotLoopOnce.Do(func() { go slotLoop() })
	slotStoreCalls.Inc()
	res, err := l.store.Slots(ctx, &store.SlotRequest{Key: []byte(b.key), Pod: l.kept.slotOwner, Limit: n, Want: 1, TTL: SlotLeaseTTL})
	b.mu.Lock()
	defer b.mu.Unlock()
	st.calls--
	if err != nil {
		return l.slotAlone(s, b, st, n)
	}
	st.full, st.renewed = res.InUse >= n, l.now().UnixNano()
	if res.Granted < 1 {
		retry := res.FreeIn
		if retry <= 0 {
			retry = slotRetry
		}
		st.refusedUntil = now + int64(slotRefusalHold)
		return s.decision(false, 0, min(retry, slotRefusalHold), 0), use{}
	}
	st.held++
	return s.decision(true, max(n-res.InUse, 0), 0, 0), use{b: b, n: 1}
}

// slotAlone decides a slot while the store fails, by limits.on_store_failure:
// local takes it when the pod's slots in use stay within its share of n
// (n ÷ the live pods, at least 1). The caller holds b.mu.
func (l *Limiter) slotAlone(s *spec, b *bucket, st *slotState, n int64) (verdict, use) {
	switch l.policy {
	case FailOpen:
		return s.decision(true, 0, 0, 0), use{}
	case FailClosed:
		d := s.decision(false, 0, l.cfg.BreakerCooldown, 0)
		d.Unavailable = true
		return d, use{}
	}
	share := max(n/int64(max(l.livePods(), 1)), 1)
	if st.held-st.idle+st.alone >= share {
		return s.decision(false, 0, slotRetry, 0), use{}
	}
	st.alone++
	slotAloneTakes.Inc()
	return s.decision(true, share-(st.held-st.idle+st.alone), 0, 0), use{b: b, n: 1, alone: true}
}

// releaseSlot gives back the slot of u: one taken alone is forgotten; one
// of the lease becomes idle, and goes back to the store at once when the
// store was full at its last answer (another pod may be waiting), else
// after slotIdleHold unless a request takes it.
func (l *Limiter) releaseSlot(u *use) {
	b := u.b
	if b == nil {
		return
	}
	b.mu.Lock()
	st := b.slotsOf()
	if u.alone {
		st.alone = max(st.alone-1, 0)
		st.refusedUntil = 0
		b.mu.Unlock()
		l.wakeWaiters(b.key)
		return
	}
	st.idle++
	st.idleAt, st.refusedUntil = l.now().UnixNano(), 0
	give := int64(0)
	if st.full {
		give, st.idle, st.held = st.idle, 0, st.held-st.idle
		st.calls++ // giveSlots' call: a renewal meanwhile does not square the count
	}
	limit := st.limit
	b.mu.Unlock()
	if give > 0 {
		l.giveSlots(b, limit, give)
	}
	l.wakeWaiters(b.key) // a request waiting for the key may take it
}

// giveSlots gives n of b's slots back to the store, in the background on
// a shared store. The caller took them out of the pod's count and counted
// the call in flight (slotState.calls), under b.mu, so that no renewal
// between the two takes them for slots the pod does not know of.
func (l *Limiter) giveSlots(b *bucket, limit, n int64) {
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.lateWait())
		defer cancel()
		slotStoreCalls.Inc()
		res, err := l.store.Slots(ctx, &store.SlotRequest{Key: []byte(b.key), Pod: l.kept.slotOwner, Limit: limit, Release: n, TTL: SlotLeaseTTL})
		b.mu.Lock()
		st := b.slotsOf()
		st.calls--
		if err == nil {
			st.full, st.renewed = res.InUse >= limit, l.now().UnixNano()
		}
		b.mu.Unlock()
	}
	if l.shared {
		go call()
		return
	}
	call()
}

// slotLoop trims and renews the slots this process holds, for ever.
func slotLoop() {
	t := time.NewTicker(slotIdleHold)
	defer t.Stop()
	lastRenew := time.Now()
	for now := range t.C {
		renew := now.Sub(lastRenew) >= slotRenewEvery
		if renew {
			lastRenew = now
		}
		slotKeys.Range(func(k, v any) bool {
			l := v.(*Limiter)
			l.tendSlots(k.(*bucket), l.now().UnixNano(), renew) // the limiter's clock dates its slots
			return true
		})
	}
}

// tendSlots gives back b's slots idle longer than slotIdleHold and, when
// renew, renews its lease; a bucket that holds none leaves slotKeys.
func (l *Limiter) tendSlots(b *bucket, now int64, renew bool) {
	b.mu.Lock()
	st := b.slotsOf()
	give := int64(0)
	if st.idle > 0 && now-st.idleAt >= int64(slotIdleHold) {
		give, st.idle, st.held = st.idle, 0, st.held-st.idle
		st.calls++ // giveSlots' call
	}
	held, limit := st.held, st.limit
	if held > 0 && now-st.renewed > int64(SlotLeaseTTL)/2 {
		// Not renewed for half a lifetime: the store may drop the lease
		// before the next renewal; the idle slots are not to be used.
		st.held -= st.idle
		st.idle = 0
	}
	if held == 0 && st.alone == 0 && st.calls == 0 {
		slotKeys.Delete(b) // nothing to renew; a call that takes a slot stores it again
	}
	b.mu.Unlock()
	switch {
	case give > 0:
		l.giveSlots(b, limit, give) // renews too
	case renew && held > 0:
		l.renewSlots(b, limit)
	}
}

// renewSlots renews b's lease, and squares the pod's count with the
// store's when no other call for the key was in flight: slots the store
// granted to a call whose answer was lost (it timed out after the store
// ran it) go back, and slots the store no longer counts (the lease
// expired while the store was out of reach) are not used again.
func (l *Limiter) renewSlots(b *bucket, limit int64) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.StoreTimeout)
	defer cancel()
	slotStoreCalls.Inc()
	b.mu.Lock()
	st := b.slotsOf()
	st.calls++
	b.mu.Unlock()
	res, err := l.store.Slots(ctx, &store.SlotRequest{Key: []byte(b.key), Pod: l.kept.slotOwner, Limit: limit, TTL: SlotLeaseTTL})
	b.mu.Lock()
	st.calls--
	if err != nil {
		b.mu.Unlock()
		slotRenewErrors.Inc()
		return
	}
	st.full, st.renewed = res.InUse >= limit, l.now().UnixNano()
	extra := int64(0)
	if st.calls == 0 {
		switch {
		case res.Held > st.held:
			extra = res.Held - st.held
		case res.Held < st.held:
			st.held = res.Held
			st.idle = min(st.idle, st.held)
		}
	}
	if extra > 0 {
		st.calls++ // giveSlots' call
	}
	b.mu.Unlock()
	if extra > 0 {
		slotsSquared.Add(int(extra))
		l.giveSlots(b, limit, extra)
	}
}

// SlotUsage answers how many of the n slots of key the pods hold now
// (their requests in flight, and the slots they keep idle a moment), from
// the store, without taking any. It fails when the store cannot answer.
func (l *Limiter) SlotUsage(ctx context.Context, key []byte, n int64) (inUse int64, err error) {
	res, err := l.store.Slots(ctx, &store.SlotRequest{Key: key, Pod: l.kept.slotOwner, Limit: n, TTL: SlotLeaseTTL})
	if err != nil {
		return 0, ErrStoreUnavailable
	}
	return res.InUse, nil
}
