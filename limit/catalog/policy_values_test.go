package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAppendIdentityOf: the identity a caller's key values make is the
// one a request carrying them makes, for every kind of attribute; a wrong
// count, an empty value or an address that does not parse is an error
// naming the value's index.
func TestAppendIdentityOf(t *testing.T) {
	keys := []string{"ip", "ip/24", "ip/64", "api_key", "tenant", "plan", "resource", "method", "path", "header:X-User", "query:q"}
	ps, err := CompilePolicies([]Policy{{Name: "all", Key: keys, Limits: []PolicyLimit{{Limit: 1}}}}, testDefaults)
	require.NoError(t, err)
	p, ok := ps.Lookup("all")
	require.True(t, ok)
	_, ok = ps.Lookup("none")
	assert.False(t, ok)
	long := strings.Repeat("v", MaxValueLen+1)
	req := &Subject{IP: []byte("10.1.2.3"), APIKey: []byte("k:1"), Tenant: "acme", Plan: "FREE", Resource: "bids",
		Method: []byte("POST"), Path: []byte("/a b"), Attrs: mapAttrs{headers: map[string]string{"X-User": long}, query: map[string]string{"q": "%x"}}}
	want, ok := p.AppendIdentity(nil, req)
	require.True(t, ok)
	for _, prefix := range []string{"10.1.2.200", "10.1.2.0/24"} {
		got, err := p.AppendIdentityOf(nil, []string{"::ffff:10.1.2.3", prefix, "10.1.2.3", "k:1", "acme", "FREE", "bids", "POST", "/a b", long, "%x"})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), prefix)
	}

	one, err := CompilePolicies([]Policy{{Name: "v6", Key: []string{"ip/48", "api_key"}, Limits: []PolicyLimit{{Limit: 1}}}}, testDefaults)
	require.NoError(t, err)
	v6 := one.All()[0]
	want, _ = v6.AppendIdentity(nil, &Subject{IP: []byte("2001:db8:1:2::9"), APIKey: []byte("k")})
	got, err := v6.AppendIdentityOf(nil, []string{"2001:db8:1::/48", "k"})
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	for _, tc := range []struct {
		values []string
		index  int
		msg    string
	}{
		{[]string{"2001:db8::1"}, -1, `policy "v6" has 2 key attributes (ip/48, api_key), got 1 values`},
		{[]string{"2001:db8::1", ""}, 1, `the api_key value is empty`},
		{[]string{"10.0.0.300", "k"}, 0, `"10.0.0.300" is not an IP address`},
		{[]string{"2001:db8::/32", "k"}, 0, `"2001:db8::/32" is a /32; the key is ip/48`},
		{[]string{"2001:db8::/x", "k"}, 0, `is not an IP address or prefix`},
	} {
		_, err := v6.AppendIdentityOf(nil, tc.values)
		var ve *ValueError
		require.ErrorAs(t, err, &ve, "%q", tc.values)
		assert.Equal(t, tc.index, ve.Index, "%q", tc.values)
		assert.Contains(t, ve.Msg, tc.msg)
	}
}
