package upstream

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func TestClassify(t *testing.T) {
	refused := &TargetError{Err: errors.New("connection refused")}
	for _, c := range []struct {
		err    error
		status int
		want   Class
	}{
		{nil, 200, Success}, {nil, 404, Success}, {nil, 413, Success},
		{nil, 503, Backpressure}, {nil, 429, Backpressure},
		{nil, 500, Failure}, {nil, 502, Failure}, {nil, 504, Failure},
		{refused, 0, Failure},
		{&TargetError{Kind: ErrTimeout, Err: fasthttp.ErrTimeout}, 0, Failure},
		{ErrNoHealthy, 0, Gateway},
		{&ClientBodyError{Err: io.ErrUnexpectedEOF}, 0, ClientFault},
	} {
		assert.Equal(t, c.want, Classify(c.err, c.status), "%v %d", c.err, c.status)
	}
}

// A backend that sheds with 503 or 429 is working: no number of such
// answers ejects it or trips its breaker, even when it is the only target.
func TestBackpressureNeverEjects(t *testing.T) {
	for _, status := range []int32{503, 429} {
		b := startBackend(t)
		b.status.Store(status)
		_, p := testPool(t, func(c *PoolConfig) {
			c.Passive = PassiveConfig{Failures: 2, EjectFor: time.Minute}
			c.Breaker = BreakerConfig{Failures: 2, OpenFor: time.Minute, HalfOpenRequests: 1}
		}, b.URL)
		tg := p.target(b.URL)
		for range 50 {
			_, code, err := get(t, p, "/")
			require.NoError(t, err)
			require.EqualValues(t, status, code)
		}
		assert.Zero(t, tg.ejectedUntil.Load(), "%d does not eject", status)
		assert.Equal(t, stateClosed, tg.breaker.state.Load(), "%d does not trip the breaker", status)
		assert.EqualValues(t, 50, tg.m.backpressure.Get())
	}
}

// Failures of the only target neither eject it nor open its breaker: the
// last capacity of a pool is never taken away.
func TestLastTargetIsNeverRemoved(t *testing.T) {
	b := startBackend(t)
	b.status.Store(502)
	_, p := testPool(t, func(c *PoolConfig) {
		c.Passive = PassiveConfig{Failures: 2, EjectFor: time.Minute}
		c.Breaker = BreakerConfig{Failures: 2, OpenFor: time.Minute, HalfOpenRequests: 1}
	}, b.URL)
	tg := p.target(b.URL)
	for range 20 {
		_, code, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, 502, code)
	}
	assert.Zero(t, tg.ejectedUntil.Load())
	assert.Equal(t, stateClosed, tg.breaker.state.Load())
	assert.NotZero(t, tg.m.removalRefused.Get())
	b.status.Store(200)
	_, code, err := get(t, p, "/")
	require.NoError(t, err)
	assert.Equal(t, 200, code, "the target serves as soon as it recovers")
}

// max_ejection_percent caps the targets held out by ejection and breakers
// together.
func TestMaxEjectionPercent(t *testing.T) {
	var urls []string
	for range 4 {
		b := startBackend(t)
		b.status.Store(500)
		urls = append(urls, b.URL)
	}
	_, p := testPool(t, func(c *PoolConfig) {
		c.Passive = PassiveConfig{Failures: 2, EjectFor: time.Minute}
		c.Breaker = BreakerConfig{Failures: 3, OpenFor: time.Minute, HalfOpenRequests: 1}
	}, urls...)
	for range 100 {
		_, _, err := get(t, p, "/")
		require.NoError(t, err)
	}
	out := 0
	for _, u := range urls {
		if p.target(u).outReasons.Load() != 0 {
			out++
		}
	}
	assert.Equal(t, 2, out, "50% of 4 targets at most")
	assert.EqualValues(t, 2, p.removal.out.Load())
}

// failingBody is a request body that the client breaks after a few bytes.
type failingBody struct{ sent bool }

func (b *failingBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "abc"), nil
	}
	return 0, &ClientBodyError{Err: io.ErrUnexpectedEOF}
}

// A body the client breaks is the client's fault: returned as such, and
// counted against nothing.
func TestClientBodyErrorCountsAgainstNothing(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, func(c *PoolConfig) {
		c.Passive = PassiveConfig{Failures: 1, EjectFor: time.Minute}
		c.Breaker = BreakerConfig{Failures: 1, OpenFor: time.Minute, HalfOpenRequests: 1}
	}, b.URL, closedURL(t))
	tg := p.target(b.URL)
	for range 10 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/upload")
		req.Header.SetHost("client.example")
		req.SetBodyStream(&failingBody{}, -1)
		err := p.Do(req, resp)
		if errors.Is(err, ErrNoHealthy) {
			continue
		}
		var te *TargetError
		if errors.As(err, &te) && te.Target != b.URL {
			continue // the closed target: a real failure
		}
		require.Error(t, err)
		assert.Equal(t, ClientFault, Classify(err, 0))
	}
	assert.Zero(t, tg.ejectedUntil.Load())
	assert.Equal(t, stateClosed, tg.breaker.state.Load())
	assert.Zero(t, tg.fails.Load())
}
