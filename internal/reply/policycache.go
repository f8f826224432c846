package reply

import (
	"sync/atomic"
	"unsafe"

	"github.com/sentinel-gateway/sentinel/limit"
)

// RateLimit-Policy names the same limits, with the same quotas and windows,
// in every answer to one client: only RateLimit's remaining and reset
// change. So the field's value is rendered once per list of limits and
// kept, and an answer copies it instead of formatting each item's name,
// quota and window again.

// policyItem is what a RateLimit-Policy item shows of one limit.
type policyItem struct {
	scope  limit.Scope
	name   string
	limit  int64
	window int64 // the w parameter, in seconds; 0: none
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
	var items [limit.MaxApplied]policyItem
	n := policyItems(&items, d)
	h := uint64(n)
	for i := range items[:n] {
		it := &items[i]
		h ^= uint64(it.scope) | uint64(uintptr(unsafe.Pointer(unsafe.StringData(it.name))))<<8 ^ uint64(len(it.name))<<3
		h ^= uint64(it.limit) * 0x9e3779b97f4a7c15
		h ^= uint64(it.window) * 0xc2b2ae3d27d4eb4f
		h = (h ^ h>>29) * 0xbf58476d1ce4e5b9
	}
	slot := &policyCache[(h^h>>32)%policySlots]
	cur := slot.Load()
	if cur != nil && cur.n == n && cur.items == items {
		return append(b, cur.value...)
	}
	start := len(b)
	for i := range items[:n] {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendItem(b, &items[i])
	}
	if cur == nil || policyMisses.Add(1)%policyRefill == 0 {
		slot.Store(&policyValue{n: n, items: items, value: append([]byte(nil), b[start:]...)})
	}
	return b
}

// policyItems writes the items of d's RateLimit-Policy to items and
// returns their number: each applied limit, or d's own limit when it lists
// none.
func policyItems(items *[limit.MaxApplied]policyItem, d *limit.Decision) int {
	if d.NApplied == 0 {
		items[0] = itemOf(&limit.Applied{Scope: d.Scope, Name: d.Name, Limit: d.Limit, Window: d.Window})
		return 1
	}
	for i := range d.Applied[:d.NApplied] {
		items[i] = itemOf(&d.Applied[i])
	}
	return d.NApplied
}

func itemOf(a *limit.Applied) policyItem {
	it := policyItem{scope: a.Scope, name: LimitName(a), limit: max(a.Limit, 0)}
	if a.Window > 0 {
		it.window = ceilSeconds(a.Window)
	}
	return it
}

// appendItem appends it as a RateLimit-Policy item: "name";q=N[;w=S].
func appendItem(b []byte, it *policyItem) []byte {
	b = appendSFString(b, it.name)
	b = append(b, ";q="...)
	b = appendInt(b, it.limit)
	if it.window > 0 {
		b = append(b, ";w="...)
		b = appendInt(b, it.window)
	}
	return b
}
