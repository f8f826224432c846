package upstream

import (
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// send sends method uri (with body, if any) through p and returns the
// answer's status, X-Uri (the request URI the backend saw) and body.
func send(p *Pool, method, uri, body string) (status int, seen, answer string, err error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost("client.example")
	if body != "" {
		req.SetBodyString(body)
	}
	err = p.Do(req, resp)
	return resp.StatusCode(), string(resp.Header.Peek("X-Uri")), string(resp.Body()), err
}

// concurrently sends GET /r?id=... from clients goroutines, each its
// requests in turn, and checks that every answer is the answer to its own
// request; query is appended to each URI.
func concurrently(t *testing.T, p *Pool, clients, requests int, query string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, clients*requests)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range requests {
				uri := "/r?id=" + strconv.Itoa(c) + "-" + strconv.Itoa(i) + query
				status, seen, _, err := send(p, "GET", uri, "")
				switch {
				case err != nil:
					errs <- err
				case status != 200 || seen != uri:
					errs <- errors.New(uri + ": answered " + strconv.Itoa(status) + " for " + seen)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// pipelined turns pipelining on. The PipelineClient connects again as soon
// as a connection breaks, whether a request waits or not; such a connection
// holds a backend's Shutdown until it closes, idle, after
// MaxIdleConnDuration.
func pipelined(c *PoolConfig) {
	c.Pipeline = 1
	c.MaxIdleConnDuration = 100 * time.Millisecond
}

// patient lets pipe's answers take up to a second before it stands aside
// (stalled, slow): for the tests of what it carries, on a machine where
// other tests' load may delay one answer past pipelineStall.
func patient(pipe *pipeline) *pipeline {
	pipe.stall = time.Second
	return pipe
}

func TestPipelineCarriesGetsInOrder(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	require.NotNil(t, p.target(b.URL).pipe)
	pipe := patient(p.target(b.URL).pipe)

	concurrently(t, p, 32, 25, "")
	// A request alone in flight (idle), or sent at a slow moment of this
	// machine (no answer for pipelineStall), takes a connection of its own.
	assert.EqualValues(t, 32*25, pipe.sent.Get()+pipe.stalled.Get()+pipe.idle.Get(), "every GET was a pipeline's")
	assert.Greater(t, pipe.sent.Get(), uint64(32*25/2))
	assert.Zero(t, pipe.resent.Get())
	assert.Zero(t, pipe.bypassed.Get())

	// A body, HEAD and other methods take a connection of their own.
	status, _, answer, err := send(p, "POST", "/echo", "payload")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Equal(t, "payload", answer)
	status, _, _, err = send(p, "HEAD", "/r?size=100", "")
	require.NoError(t, err, "HEAD: an answer with a length and no body")
	assert.Equal(t, 200, status)
	status, _, answer, err = send(p, "GET", "/r?size=3", "")
	require.NoError(t, err, "the target still answers after the HEAD")
	assert.Equal(t, 200, status)
	assert.Len(t, answer, 3)
	assert.EqualValues(t, 32*25+1, pipe.sent.Get()+pipe.stalled.Get()+pipe.idle.Get())
	assert.Zero(t, pipe.resent.Get(), "nothing needed sending again")
}

// A target that closes its connection after every answer: each request
// pipelined behind another is lost with the connection, and is sent again
// on a connection of its own, without counting against the target.
func TestPipelineResendsWhatAClosedConnectionLost(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	tg := p.target(b.URL)
	patient(tg.pipe)

	concurrently(t, p, 16, 10, "&close=1")
	assert.Positive(t, tg.pipe.resent.Get(), "requests queued behind a closed connection were sent again")
	assert.Zero(t, tg.m.failure.Get(), "no failure counted against the target")
	assert.Zero(t, tg.m.timeout.Get())
	assert.EqualValues(t, 16*10, tg.m.success.Get())
}

// A target that cannot be connected to fails its requests at once, as
// without pipelining, so the pool sends them to another target: none waits
// for the pool timeout (2s here; a request that did would fail with
// ErrTimeout).
func TestPipelineDeadTargetFailsOver(t *testing.T) {
	live := startBackend(t)
	dead := closedURL(t)
	_, p := testPool(t, pipelined, dead, live.URL)
	d := p.target(dead)
	// Another request in flight to the dead target throughout (counted, not
	// sent): its requests fail too fast to overlap, and alone a request
	// would not be the pipeline's (idle).
	d.pending.Add(1)
	defer d.pending.Add(-1)

	concurrently(t, p, 16, 10, "")
	assert.Positive(t, d.m.failure.Get(), "the dead target's connect failures are counted")
	assert.Zero(t, d.pipe.sent.Get())
	assert.True(t, d.pipe.down.Load(), "its pipeline is down: requests take the HostClient")
	assert.Positive(t, d.pipe.bypassed.Get())
}

// A pipeline that could not connect comes back once the target answers a
// request on a connection of its own.
func TestPipelineComesBackWithTheTarget(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	tg := p.target(b.URL)
	pipe := tg.pipe
	// Another request in flight throughout (counted, not sent), so that each
	// request here is one the pipeline takes: alone it would not (idle).
	tg.pending.Add(1)
	defer tg.pending.Add(-1)

	b.stop()
	_, _, _, err := send(p, "GET", "/r", "")
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrTimeout), "a connect failure, not a timeout: %v", err)
	dialed, _ := errorKind(err)
	assert.True(t, dialed, "%v", err)
	assert.True(t, pipe.down.Load())

	b.restart(t)
	concurrently(t, p, 1, 3, "")
	assert.False(t, pipe.down.Load(), "the target answered: the pipeline is up again")
	sent := pipe.sent.Get()
	concurrently(t, p, 4, 5, "")
	assert.Greater(t, pipe.sent.Get(), sent)
}

func TestPipelineConfig(t *testing.T) {
	for _, n := range []int{-1, MaxPipeline + 1} {
		c := Config{"api": {Targets: []string{"http://127.0.0.1:1"}, Pipeline: n}}
		c.SetDefaults()
		err := c.Validate()
		require.Error(t, err, "pipeline %d", n)
		assert.Contains(t, err.Error(), "upstreams.api.pipeline: "+strconv.Itoa(n)+" must be within 0..64")
	}
}

// A request whose body is still arriving (a stream) takes a connection of
// its own: on the pipeline's, a slow client would hold every request behind
// it.
func TestPipelineLeavesBodyStreamsAlone(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	patient(p.target(b.URL).pipe)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("/upload")
		req.Header.SetHost("client.example")
		req.SetBodyStream(pr, 5)
		done <- p.Do(req, resp)
	}()
	_, _ = pw.Write([]byte("ab")) // the upload has started and stalls
	concurrently(t, p, 8, 5, "")
	_, _ = pw.Write([]byte("cde"))
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)
	pipe := p.target(b.URL).pipe
	assert.EqualValues(t, 8*5, pipe.sent.Get()+pipe.stalled.Get()+pipe.idle.Get(), "the GETs were not held behind the upload")
	assert.Positive(t, pipe.sent.Get())
}

// One slow answer holds the requests pipelined behind it: once the
// pipeline has answered nothing for pipelineStall with a request in flight,
// new requests take connections of their own (without that, each of them
// would wait for the held request and time out).
func TestPipelineStallIsBypassed(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	pipe := p.target(b.URL).pipe
	release := sync.OnceFunc(func() { close(b.gate) })
	t.Cleanup(release) // before the backend's stop, which waits for held requests
	// The first request is alone in flight and takes a connection of its
	// own; the second, sent while the first is held, is pipelined.
	held := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, _, _, err := send(p, "GET", "/block", "")
			held <- err
		}()
		require.Eventually(t, func() bool { return b.hits.Load() == int64(i+1) }, 2*time.Second, time.Millisecond)
	}
	require.EqualValues(t, 1, pipe.inflight.Load())
	time.Sleep(2 * pipelineStall)

	concurrently(t, p, 4, 5, "")
	assert.EqualValues(t, 20, pipe.stalled.Get())
	assert.Zero(t, pipe.sent.Get())
	release()
	require.NoError(t, <-held)
	require.NoError(t, <-held)
	// The held request was a slow pipelined answer: a back-off follows.
	concurrently(t, p, 4, 5, "")
	assert.EqualValues(t, 1, pipe.sent.Get(), "pipelined during the back-off")
	time.Sleep(pipelineBackoff)
	concurrently(t, p, 4, 5, "")
	assert.Greater(t, pipe.sent.Get(), uint64(1), "the back-off ended")
}

// A target that answers a connection's requests one after another, each
// in 50 ms: pipelined, it would serve 20 requests a second. After the first
// slow answer the requests take connections of their own: 40 requests from
// 8 clients are all answered within the pool's timeout (2 s), which 40
// answers of 50 ms in a row (2 s) would not be.
func TestPipelineStepsAsideForASlowTarget(t *testing.T) {
	b := startBackend(t)
	b.delay.Store(int64(50 * time.Millisecond))
	_, p := testPool(t, pipelined, b.URL)
	pipe := p.target(b.URL).pipe
	concurrently(t, p, 8, 5, "")
	assert.Positive(t, pipe.stalled.Get())
	assert.Less(t, pipe.sent.Get(), uint64(10))
}

// A request alone in flight to the target gains nothing from the pipeline
// and takes a connection of its own.
func TestPipelineLeavesALoneRequestAlone(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	pipe := p.target(b.URL).pipe
	concurrently(t, p, 1, 10, "")
	assert.Zero(t, pipe.sent.Get())
	assert.EqualValues(t, 10, pipe.idle.Get())
}

// An answer over pipelineMaxAnswer is not held whole: its pipelined
// connection is cut, and it is fetched again on a connection of its own,
// streamed; the pipeline goes on answering.
func TestPipelineFetchesLargeAnswersApart(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, pipelined, b.URL)
	tg := p.target(b.URL)
	patient(tg.pipe)
	tg.pending.Add(1) // another request in flight (counted, not sent): the pipeline takes the GETs
	defer tg.pending.Add(-1)
	concurrently(t, p, 1, 1, "") // the first request probes the target: then the pipeline is open
	require.Zero(t, tg.pipe.slowUntil.Load())

	size := 3 * pipelineMaxAnswer
	status, _, answer, err := send(p, "GET", "/r?size="+strconv.Itoa(size), "")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Len(t, answer, size)
	assert.EqualValues(t, 1, tg.pipe.large.Get(), "sent %d resent %d stalled %d idle %d bypassed %d", tg.pipe.sent.Get(), tg.pipe.resent.Get(), tg.pipe.stalled.Get(), tg.pipe.idle.Get(), tg.pipe.bypassed.Get())
	assert.Zero(t, tg.m.failure.Get())

	sent := tg.pipe.sent.Get()
	concurrently(t, p, 4, 10, "")
	assert.Greater(t, tg.pipe.sent.Get(), sent)
}
