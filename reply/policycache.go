package reply

import (
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sentinel-gateway/sentinel/limit"
)

// RateLimit-Policy names the same limits, with the same quotas and windows,
// in every answer to one client: only RateLimit's remaining and reset
// change. So the field's value is rendered once per list of limits and
// kept, and an answer copies it instead of formatting each item's name,
// quota and window again.

// policyItem is what a RateLimit-Policy item is rendered from: the fields
// of one applied limit that it shows.
type policyItem struct {
	scope  limit.Scope
	name   string
	limit  int64
	window time.Duration
}

func (it *policyItem) is(a *limit.Applied) bool {
	return it.scope == a.Scope && it.limit == a.Limit && it.window == a.Window && it.name == a.Name
}

// policyValue is a rendered RateLimit-Policy value and the items it shows.
type policyValue struct {
	n     int
	items [limit.MaxApplied]policyItem
	value []byte
}

// policySlots is the size of the cache: lists of limits beyond it (many
// tenants with limits of their own, or limits the adaptive layer scales)
// share slots, and a list whose slot holds another is rendered each time.
const policySlots = 1024

var (
	policyCache [policySlots]atomic.Pointer[policyValue]
	// policyMisses counts renders of lists not in their slot: one in
	// policyRefill of them takes the slot over (an allocation), so that
	// lists competing for a slot do not allocate on every answer.
	policyMisses atomic.Uint32
)

const policyRefill = 16

// appendPolicyList appends d's RateLimit-Policy value to b, from the cache
// when d lists the same limits as an earlier answer.
func appendPolicyList(b []byte, d *limit.Decision) []byte {
	list := d.Applied[:d.NApplied]
	var own [1]limit.Applied
	if d.NApplied == 0 { // a decision that lists no limits: its own
		own[0] = limit.Applied{Scope: d.Scope, Name: d.Name, Limit: d.Limit, Window: d.Window}
		list = own[:]
	}
	h := uint64(len(list))
	for i := range list {
		a := &list[i]
		h ^= uint64(a.Scope) | uint64(uintptr(unsafe.Pointer(unsafe.StringData(a.Name))))<<8 ^ uint64(len(a.Name))<<3
		h ^= uint64(a.Limit) * 0x9e3779b97f4a7c15
		h ^= uint64(a.Window) * 0xc2b2ae3d27d4eb4f
		h = (h ^ h>>29) * 0xbf58476d1ce4e5b9
	}
	slot := &policyCache[(h^h>>32)%policySlots]
	cur := slot.Load()
	if cur != nil && cur.n == len(list) && cur.holds(list) {
		return append(b, cur.value...)
	}
	start := len(b)
	for i := range list {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPolicy(b, &list[i])
	}
	if cur == nil || policyMisses.Add(1)%policyRefill == 0 {
		v := &policyValue{n: len(list), value: append([]byte(nil), b[start:]...)}
		for i := range list {
			a := &list[i]
			v.items[i] = policyItem{scope: a.Scope, name: a.Name, limit: a.Limit, window: a.Window}
		}
		slot.Store(v)
	}
	return b
}

// holds reports whether v was rendered from list (as long as v's).
func (v *policyValue) holds(list []limit.Applied) bool {
	for i := range list {
		if !v.items[i].is(&list[i]) {
			return false
		}
	}
	return true
}

// appendPolicy appends a's RateLimit-Policy item: "name";q=N[;w=S].
func appendPolicy(b []byte, a *limit.Applied) []byte {
	b = appendSFString(b, LimitName(a))
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, max(a.Limit, 0), 10)
	if a.Window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, ceilSeconds(a.Window), 10)
	}
	return b
}
