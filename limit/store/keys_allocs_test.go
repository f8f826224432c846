//go:build !race

package store

import "testing"

func TestAppendKeyAllocs(t *testing.T) {
	buf := make([]byte, 0, 128)
	ip, tenant := []byte("10.0.0.7"), "acme"
	n := testing.AllocsPerRun(100, func() {
		buf = AppendKey(buf[:0], "sentinel", "ip", ip)
		buf = AppendKeyStrings(buf[:0], "sentinel", "rule", tenant, "bids")
	})
	if n != 0 {
		t.Fatalf("AppendKey allocates %v times", n)
	}
}
