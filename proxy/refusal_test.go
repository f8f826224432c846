package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// TestRefusalNamesThePolicy: a policy's 429 says which policy and which of
// its limits refused, the window as configured ("1m", not "1m0s"), and its
// RateLimit t and Retry-After name the same second.
func TestRefusalNamesThePolicy(t *testing.T) {
	be := startBackend(t)
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.IP, cfg.Tenant = 0, 0
	ps, err := catalog.CompilePolicies([]catalog.Policy{{Name: "bids-per-user", Key: []string{"ip"},
		Limits: []catalog.PolicyLimit{{Limit: 2, Window: confutil.Duration(time.Minute)}, {Limit: 1000, Period: store.Month}}}},
		cfg.CatalogDefaults())
	require.NoError(t, err)
	mem := store.NewMemoryStore(store.MemoryOptions{})
	defer mem.Close()
	lim, err := limit.NewLimiter(cfg, mem, limit.Options{Policies: ps})
	require.NoError(t, err)
	defer lim.Close()
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) { d.Limiter = lim })
	for range 2 {
		r, _ := get(t, p.url+"/")
		require.Equal(t, http.StatusOK, r.StatusCode)
	}
	resp, body := get(t, p.url+"/")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	var b map[string]any
	require.NoError(t, json.Unmarshal(body, &b), "%s", body)
	assert.Equal(t, "policy", b["scope"])
	assert.Equal(t, "bids-per-user", b["policy"], "%s", body)
	assert.Equal(t, "1m", b["window"], "%s", body)
	assert.EqualValues(t, 2, b["limit"])
	assert.Contains(t, resp.Header.Get("RateLimit-Policy"), `"bids-per-user/1m";q=2;w=60`)
	assert.Contains(t, resp.Header.Get("RateLimit-Policy"), `"bids-per-user/month";q=1000`)
	rl := resp.Header.Get("RateLimit")
	assert.True(t, strings.HasPrefix(rl, `"bids-per-user/1m";r=0;t=`), rl)
	assert.Equal(t, resp.Header.Get("Retry-After"), rl[strings.LastIndex(rl, "=")+1:], "t and Retry-After agree")
	_, err = strconv.Atoi(resp.Header.Get("Retry-After"))
	assert.NoError(t, err)
}
