package reply

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/limit"
)

// TestPolicyListCachedEqualsRendered: RateLimit-Policy from the cache is
// what rendering each item gives, for more lists than the cache has slots
// (lists that share a slot, a slot taken over, hits and misses), each
// asked for several times in a random order.
func TestPolicyListCachedEqualsRendered(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"", "bids-per-user/1s", `we"ird\name`, "daily"}
	decisions := make([]limit.Decision, 3*policySlots)
	for i := range decisions {
		d := &decisions[i]
		d.NApplied = rng.IntN(limit.MaxApplied + 1)
		d.Scope, d.Limit, d.Window = limit.ScopeTenant, rng.Int64N(1e9), time.Duration(rng.IntN(3))*time.Second
		for j := range d.Applied[:d.NApplied] {
			d.Applied[j] = limit.Applied{Scope: limit.Scope(1 + rng.IntN(6)), Name: names[rng.IntN(len(names))],
				Limit: rng.Int64N(1e9) - 10, Window: time.Duration(rng.Int64N(int64(time.Hour)))}
		}
	}
	for range 5 {
		for _, i := range rng.Perm(len(decisions)) {
			d := &decisions[i]
			if got, want := string(appendPolicyList(nil, d)), renderPolicy(d); got != want {
				t.Fatalf("decision %d: RateLimit-Policy %q, want %q", i, got, want)
			}
		}
	}
}

// renderPolicy is RateLimit-Policy rendered item by item, without the cache.
func renderPolicy(d *limit.Decision) string {
	list := d.Applied[:d.NApplied]
	if d.NApplied == 0 {
		list = []limit.Applied{{Scope: d.Scope, Name: d.Name, Limit: d.Limit, Window: d.Window}}
	}
	var b []byte
	for i := range list {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPolicy(b, &list[i]) // one item, as TestSetRateLimitHeaders checks it
	}
	return string(b)
}
