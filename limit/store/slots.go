package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Concurrency slots: a limit on the requests in flight for one key, across
// pods. Each pod holds its slots under a lease of its own (one field of the
// key, named by the pod) that every call of the pod renews for TTL; the
// slots of a pod that stops calling (it died, or lost the store) come back
// when its lease expires. Both stores drop the expired leases before they
// count, so they give the same answers; the Redis store runs lua/slots.lua
// with Redis' clock, the MemoryStore its own clock.
//
// A call whose answer is lost (ctx done, a network error) may still have
// run: the store may then hold slots for the pod that the pod does not know
// of, and every later call would renew them. The answer's Held is the
// pod's count in the store: a caller that compares it with the slots it
// knows it holds gives back the difference with its next call's Release.

// SlotRequest takes or gives back slots of a concurrency limit for one pod,
// and renews the pod's lease.
type SlotRequest struct {
	Key     []byte        // the limit's store key (with its hash tag); not kept
	Pod     string        // the calling pod's name: its lease's field (1..MaxPodName bytes)
	Limit   int64         // the most slots held across pods (0..MaxLimit)
	Release int64         // slots of this pod's lease given back first (0..its count; more is clamped)
	Want    int64         // slots to take after the release (0: none; 0..MaxLimit)
	Need    int64         // the fewest worth taking: fewer available grants none (0 means Want; 1..Want)
	TTL     time.Duration // the pod's lease lives this long from the call (every call renews it); 1ms..1h
}

// SlotResult is the store's answer to a SlotRequest.
type SlotResult struct {
	Granted int64 // slots taken by this call (0 or Need..Want)
	Held    int64 // this pod's slots after the call
	InUse   int64 // slots held by all pods whose lease lives, after the call
	// FreeIn, when Granted < Need, is until the soonest lease of another
	// pod expires (0: none held by others; the caller retries on its own
	// schedule). It is a bound, not a promise: that pod may release its
	// slots sooner, or renew its lease and keep them.
	FreeIn time.Duration
}

// MaxPodName bounds the length of SlotRequest.Pod.
const MaxPodName = 128

// suffixSlots is the suffix of a concurrency limit's key (see keys.go).
const suffixSlots = ":cs"

// ErrNoRoom is the answer of a full MemoryStore to a SlotRequest that
// would make a new key (see makeRoom): nothing was taken.
var ErrNoRoom = errors.New("limit: memory store has no room for a new key")

var errNilSlots = errors.New("limit: nil slot request")

// checkSlots validates a request before either store runs it: the script
// relies on these bounds.
func checkSlots(req *SlotRequest) error {
	if req == nil {
		return errNilSlots
	}
	if len(req.Key) == 0 {
		return errors.New("limit: slot request without a key")
	}
	if len(req.Pod) == 0 || len(req.Pod) > MaxPodName {
		return fmt.Errorf("limit: slots of %q: pod name of %d bytes is out of range 1..%d", req.Key, len(req.Pod), MaxPodName)
	}
	if req.Limit < 0 || req.Limit > MaxLimit {
		return fmt.Errorf("limit: slots of %q: limit %d is out of range 0..%d", req.Key, req.Limit, int64(MaxLimit))
	}
	if req.Release < 0 || req.Release > MaxLimit {
		return fmt.Errorf("limit: slots of %q: release of %d slots is out of range 0..%d", req.Key, req.Release, int64(MaxLimit))
	}
	if req.Want < 0 || req.Want > MaxLimit {
		return fmt.Errorf("limit: slots of %q: want of %d slots is out of range 0..%d", req.Key, req.Want, int64(MaxLimit))
	}
	if req.Need < 0 || req.Need > req.Want {
		return fmt.Errorf("limit: slots of %q: need %d is out of range 0..want (%d)", req.Key, req.Need, req.Want)
	}
	if req.TTL < time.Millisecond || req.TTL > time.Hour {
		return fmt.Errorf("limit: slots of %q: lease TTL %v is out of range [1ms, 1h]", req.Key, req.TTL)
	}
	return nil
}

// need is Need with its default of Want.
func (r *SlotRequest) need() int64 {
	if r.Need == 0 {
		return r.Want
	}
	return r.Need
}

// slotsAnswer is an answer in the script's units.
type slotsAnswer struct {
	granted, held, inUse, freeMS int64
}

func (a slotsAnswer) result() SlotResult {
	return SlotResult{Granted: a.granted, Held: a.held, InUse: a.inUse, FreeIn: fromMS(a.freeMS)}
}

// Slots runs req on the attached store; before Attach it fails
// (ErrNotConnected).
func (s *LateStore) Slots(ctx context.Context, req *SlotRequest) (SlotResult, error) {
	st := s.cur.Load()
	if st == nil {
		return SlotResult{}, ErrNotConnected
	}
	return (*st).Slots(ctx, req)
}
