package cache

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func newTestCache(t *testing.T) *Cache {
	t.Helper()
	c := New(Config{})
	t.Cleanup(c.Close)
	return c
}

// TestCacheStorable: the cache holds no request headers in its key, so an
// answer that varies on one (or on everything) is not stored; neither are
// private or no-store answers.
func TestCacheStorable(t *testing.T) {
	c := newTestCache(t)
	tests := []struct {
		name    string
		headers []string
		stored  bool
	}{
		{"plain", nil, true},
		{"public", []string{"Cache-Control", "public, max-age=60"}, true},
		{"vary encoding, not encoded", []string{"Vary", "Accept-Encoding"}, true},
		{"vary encoding, encoded", []string{"Vary", "accept-encoding", "Content-Encoding", "gzip"}, false},
		{"vary star", []string{"Vary", "*"}, false},
		{"vary api key", []string{"Vary", "Accept-Encoding, X-API-Key"}, false},
		{"vary authorization", []string{"Vary", "Authorization"}, false},
		{"private", []string{"Cache-Control", "max-age=60, Private"}, false},
		{"no-store", []string{"Cache-Control", "no-store"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp fasthttp.Response
			resp.SetStatusCode(200)
			resp.SetBodyString("body")
			for i := 0; i+1 < len(tt.headers); i += 2 {
				resp.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			key := []byte("GET h/" + tt.name)
			c.Set(key, &resp, time.Minute)
			var got fasthttp.Response
			assert.Equal(t, tt.stored, c.Get(key, &got))
		})
	}
}

var hitsLine = regexp.MustCompile(`(?m)^sentinel_cache_hits_total (\d+)$`)

// hitSeries returns the values of every sentinel_cache_hits_total series
// the process exposes.
func hitSeries() []string {
	var b bytes.Buffer
	metrics.WritePrometheus(&b, false)
	var out []string
	for _, m := range hitsLine.FindAllStringSubmatch(b.String(), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestCacheMetricsPerInstance: each cache counts into its own series, and a
// closed cache's series are gone.
func TestCacheMetricsPerInstance(t *testing.T) {
	require.Empty(t, hitSeries(), "no cache before the test")
	a, b := New(Config{}), New(Config{})
	var resp fasthttp.Response
	resp.SetBodyString("body")
	a.Set([]byte("k"), &resp, time.Minute)
	for range 3 {
		require.True(t, a.Get([]byte("k"), &resp))
	}
	assert.ElementsMatch(t, []string{"3", "0"}, hitSeries())
	assert.EqualValues(t, 3, a.Stats().Hits)
	assert.Zero(t, b.Stats().Hits)
	a.Close()
	assert.Equal(t, []string{"0"}, hitSeries())
	b.Close()
	assert.Empty(t, hitSeries())
}
