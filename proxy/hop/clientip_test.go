package hop

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustTrusted(t testing.TB, list ...string) Trusted {
	ts := make(Trusted, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		require.NoError(t, err)
		ts = append(ts, p)
	}
	return ts
}

func chainOf(values ...string) *xffChain {
	var c xffChain
	for _, v := range values {
		c.add([]byte(v))
	}
	return &c
}

func TestClientIPFromXFF(t *testing.T) {
	ts := mustTrusted(t, "10.0.0.0/8", "192.168.1.1/32")
	peer := netip.MustParseAddr("10.0.0.1")
	tests := []struct {
		name   string
		values []string
		want   string
	}{
		{"one client", []string{"203.0.113.7"}, "203.0.113.7"},
		{"client then trusted hops", []string{"203.0.113.7, 10.1.1.1, 192.168.1.1"}, "203.0.113.7"},
		{"spoofed left part ignored", []string{"1.1.1.1, 203.0.113.7, 10.1.1.1"}, "203.0.113.7"},
		{"several headers", []string{"1.1.1.1", "203.0.113.7", "10.2.2.2"}, "203.0.113.7"},
		{"ports and v6", []string{"[2001:db8::1]:443, 10.1.1.1:80"}, "2001:db8::1"},
		{"v4 with port", []string{"203.0.113.9:1234"}, "203.0.113.9"},
		{"all trusted: leftmost", []string{"10.9.9.9, 10.1.1.1"}, "10.9.9.9"},
		{"garbage stops the walk", []string{"1.1.1.1, nonsense, 10.1.1.1"}, "10.1.1.1"},
		{"garbage right at peer", []string{"1.1.1.1, nonsense"}, "10.0.0.1"},
		{"empty", nil, "10.0.0.1"},
		{"empty entries", []string{" , ,203.0.113.7,"}, "203.0.113.7"},
		{"v4-mapped", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chainOf(tt.values...).clientIP(peer, ts)
			assert.Equal(t, tt.want, got.String())
		})
	}
}

func TestClientIPLongChainKeepsRightmost(t *testing.T) {
	ts := mustTrusted(t, "10.0.0.0/8")
	hops := make([]string, 0, 40)
	hops = append(hops, "203.0.113.1")
	for i := 0; i < 39; i++ {
		hops = append(hops, "10.0.0.2")
	}
	// Every remembered hop is trusted: the leftmost remembered one is used.
	got := chainOf(strings.Join(hops, ",")).clientIP(netip.MustParseAddr("10.0.0.1"), ts)
	assert.Equal(t, "10.0.0.2", got.String())
	got = chainOf("203.0.113.1, 10.0.0.2").clientIP(netip.MustParseAddr("10.0.0.1"), ts)
	assert.Equal(t, "203.0.113.1", got.String())
}

func FuzzClientIP(f *testing.F) {
	for _, s := range []string{"203.0.113.7", "1.1.1.1, 10.0.0.1", "[::1]:80, x", "", ",,,", "::ffff:1.2.3.4", "fe80::1%eth0", "1.2.3.4:99999"} {
		f.Add(s)
	}
	ts := mustTrusted(f, "10.0.0.0/8", "::1/128")
	peer := netip.MustParseAddr("10.0.0.1")
	f.Fuzz(func(t *testing.T, xff string) {
		c := chainOf(xff)
		got := c.clientIP(peer, ts)
		if !got.IsValid() {
			t.Fatalf("invalid client IP for %q", xff)
		}
		// The answer is the peer or one of the entries; if it is trusted,
		// every entry to its right is trusted too (nothing untrusted skipped).
		kept := min(c.n, maxXFFHops)
		found := got == peer
		for i := 1; i <= kept; i++ {
			a := c.hops[(c.n-i)%maxXFFHops]
			if a == got || !a.IsValid() {
				found = found || a == got || !a.IsValid()
				break
			}
			if a.IsValid() && !ts.Contains(a) {
				t.Fatalf("%q: untrusted %s right of the answer %s", xff, a, got)
			}
		}
		if !found {
			t.Fatalf("%q: answer %s is not in the chain", xff, got)
		}
	})
}
