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

func TestShedDepthAnswers503AtOnce(t *testing.T) {
	b := New(Options{Latency: 500 * time.Millisecond, Slots: 1, QueueTimeout: 5 * time.Second, ShedDepth: 2, RetryAfter: 1})
	url := serve(t, b)
	type answer struct {
		code       int
		retryAfter string
		body       string
	}
	answers := make(chan answer, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(url + "/work")
			err := (&fasthttp.Client{}).Do(req, resp)
			assert.NoError(t, err)
			answers <- answer{resp.StatusCode(), string(resp.Header.Peek("Retry-After")), string(resp.Body())}
		}()
	}
	wg.Wait()
	close(answers)
	var ok, shed int
	for a := range answers {
		switch a.code {
		case 200:
			ok++
		case 503:
			shed++
			assert.Equal(t, "1", a.retryAfter)
			assert.Contains(t, a.body, "backend busy", "shed at once, not after the queue timeout")
		}
	}
	// One in service and two waiting: the other five are shed.
	assert.Equal(t, 3, ok)
	assert.Equal(t, 5, shed)
	assert.EqualValues(t, 5, b.Stats().Shed)
	assert.Zero(t, b.Stats().Rejected)
}

func TestConfigureShedding(t *testing.T) {
	b := New(Options{})
	url := serve(t, b)
	code, _, _ := fasthttp.Post(nil, url+"/_backend/config?shed_depth=7&retry_after=2", nil)
	assert.Equal(t, 200, code)
	assert.EqualValues(t, 7, b.Stats().ShedDepth)
	assert.EqualValues(t, 2, b.Stats().RetryAfter)
	code, body, _ := fasthttp.Post(nil, url+"/_backend/config?shed_depth=x", nil)
	assert.Equal(t, 400, code)
	assert.Contains(t, string(body), "shed_depth")
}

func TestFixedBodyAnswersEveryRequestTheSame(t *testing.T) {
	b := New(Options{FixedBody: 64})
	url := serve(t, b)
	for _, path := range []string{"/", "/hello?status=503&sleep=1s", "/bytes/1000", "/_backend/stats"} {
		code, body, err := fasthttp.Get(nil, url+path)
		require.NoError(t, err, path)
		assert.Equal(t, 200, code, path)
		assert.Len(t, body, 64, path)
		assert.Equal(t, byte('\n'), body[63], path)
	}
	assert.Equal(t, int64(4), b.Stats().Served)
}
