package faults

import (
	"testing"
	"time"
)

// TestFaultClusterFailover: three pods on a Redis Cluster of three masters
// with a replica each; a steady tenant at 50% of its limit and a tenant
// flooding at 300%, whose counters live on different masters (slots 1538
// and 6769). One master is killed and its replica takes its slots over
// (about two node timeouts, with whatever it had replicated by then): once
// the flooder's master, so the steady tenant's master survives it, and once
// the steady tenant's own. Both promises are checked on every window
// (chaos_check_test.go): no window of either tenant holds more than the
// limit + 2%, and the steady tenant is never refused while under its limit
// with room in its pod's share.
func TestFaultClusterFailover(t *testing.T) {
	for _, c := range []struct {
		name string
		pod  int // chaosFault.Pod of a failover: 0 the steady tenant's master, 1 the flooder's
	}{{"surviving master", 1}, {"failed master", 0}} {
		t.Run(c.name, func(t *testing.T) {
			s := chaosSchedule{Pods: 3, Algorithm: "sliding_window", Limit: 100, Steady: 50, Cluster: true,
				Faults: []chaosFault{{Kind: "failover", At: 2 * time.Second, For: 4 * time.Second, Pod: c.pod}},
				Length: 8500 * time.Millisecond}
			t.Logf("faults: %v", s)
			runSchedule(t, s)
		})
	}
}
