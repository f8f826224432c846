package upstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

// TestCacheStorable: the cache holds no request headers in its key, so an
// answer that varies on one (or on everything) is not stored; neither are
// private or no-store answers.
func TestCacheStorable(t *testing.T) {
	c := NewCache(CacheConfig{})
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
