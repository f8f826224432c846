package harness

import (
	"testing"
	"time"
)

// Eventually polls cond every 10ms until it holds, and returns how long it
// took; the test fails when it does not hold within the bound (a bound that
// only a stuck gateway misses, never a timing being asserted).
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
