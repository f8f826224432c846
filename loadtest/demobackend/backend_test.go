package demobackend

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func serve(t *testing.T, b *Backend) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &fasthttp.Server{Handler: b.Handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func TestEchoStatusHealth(t *testing.T) {
	b := New(Options{})
	url := serve(t, b)
	code, body, err := fasthttp.Get(nil, url+"/hello?x=1")
	require.NoError(t, err)
	assert.Equal(t, 200, code)
	assert.Contains(t, string(body), `"path":"/hello"`)
	code, _, _ = fasthttp.Get(nil, url+"/x?status=418")
	assert.Equal(t, 418, code)
	code, body, _ = fasthttp.Get(nil, url+"/bytes/1000")
	assert.Equal(t, 200, code)
	assert.Len(t, body, 1000)
	code, _, _ = fasthttp.Get(nil, url+"/healthz")
	assert.Equal(t, 200, code)
	code, _, _ = fasthttp.Post(nil, url+"/_backend/config?healthy=false&latency=5ms", nil)
	assert.Equal(t, 200, code)
	code, _, _ = fasthttp.Get(nil, url+"/healthz")
	assert.Equal(t, 503, code)
	assert.Equal(t, "5ms", b.Stats().Latency)
}

func TestCapacityModelRejectsWhenOverloaded(t *testing.T) {
	b := New(Options{Latency: 50 * time.Millisecond, Slots: 2, QueueTimeout: 60 * time.Millisecond})
	url := serve(t, b)
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &fasthttp.Client{}
			code, _, _ := c.Get(nil, url+"/work")
			codes <- code
		}()
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	assert.Positive(t, n[503], "an overloaded backend sheds: %v", n)
	assert.Positive(t, n[200])
	assert.EqualValues(t, n[503], b.Stats().Rejected)
}
