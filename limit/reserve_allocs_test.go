//go:build !race

package limit

import "testing"

// TestCostDecisionAllocatesNothing decides and settles a request of a cost
// limit and of a count_if limit (beside the IP and tenant limits) from a
// warm local lease, as BenchmarkCostLimitLocal does.
func TestCostDecisionAllocatesNothing(t *testing.T) {
	for _, k := range meteredKinds {
		l, _, req := meteredLimiter(t, k.limit)
		var d Decision
		for range 10 {
			decideAndSettle(t, l, req, &d, k.actual)
		}
		if n := testing.AllocsPerRun(1000, func() { decideAndSettle(t, l, req, &d, k.actual) }); n != 0 {
			t.Errorf("%s: a decision and its settlement allocate %.1f times", k.name, n)
		}
	}
}
