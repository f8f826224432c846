package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// FreePorts returns n distinct loopback ports that were free a moment ago,
// for a process the test starts later (a gateway started in the test
// listens on :0 instead).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n && tries < 100*n; tries++ {
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		ports = append(ports, p)
	}
	require.Len(t, ports, n, "no free loopback ports in %d..%d", lo, hi)
	return ports
}

// FreeAddr is one free loopback host:port (FreePorts).
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePorts(t, 1)[0])
}

// ephemeralLow is the low end of the kernel's ephemeral port range. Ports
// for a process that starts later are picked below it: a port taken by
// listening on :0 comes from that range, where an outgoing connection of a
// test running in parallel may take it before the process listens on it
// (deploy/cluster.sh builds for seconds first; a gateway then failed with
// "address already in use").
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low < 12000 {
		return 32768
	}
	return low
}
