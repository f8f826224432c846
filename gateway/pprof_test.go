package gateway

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPprofListenerIsLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.1.2.3:6060", "example.com:6060", "6060"} {
		ln, err := listenPprof(addr)
		if !assert.Error(t, err, addr) {
			ln.Close()
			continue
		}
		assert.Contains(t, err.Error(), "-pprof: ", addr)
	}
}

func TestPprofServesProfiles(t *testing.T) {
	ln, err := listenPprof("127.0.0.1:0")
	require.NoError(t, err)
	stop := servePprof(ln)
	defer stop()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/debug/pprof/")
	assert.Equal(t, 200, code)
	assert.Contains(t, body, "allocs")
	code, body = get("/debug/pprof/allocs?debug=1")
	assert.Equal(t, 200, code)
	assert.Contains(t, body, "heap profile")
	code, _ = get("/metrics")
	assert.Equal(t, 404, code, "only the profiles are served here")
}
