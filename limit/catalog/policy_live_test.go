package catalog

import (
	"testing"

	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLiveSet: a live set answers with the policies stored last, none
// before the first.
func TestLiveSet(t *testing.T) {
	l := NewLivePolicies()
	ls := l.Set()
	assert.Equal(t, 0, ls.Len())
	named, any := ls.For("bids")
	assert.Empty(t, named)
	assert.Empty(t, any)

	ps, err := CompilePolicies([]Policy{{Name: "bids", Match: PolicyMatch{Resources: []string{"bids"}}, Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 5}}},
		{Name: "all", Key: []string{"ip"}, Limits: []PolicyLimit{{Limit: 50}}}}, Defaults{Algorithm: store.SlidingWindow, Window: 1e9})
	require.NoError(t, err)
	l.Store(ps)
	assert.Equal(t, 2, ls.Len())
	assert.Equal(t, ps.All(), ls.All())
	named, any = ls.For("bids")
	assert.Equal(t, "bids", named[0].Name)
	assert.Equal(t, "all", any[0].Name)

	l.Store(nil)
	assert.Equal(t, 0, ls.Len())
}
