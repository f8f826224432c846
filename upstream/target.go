package upstream

import (
	"log/slog"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
	"github.com/sentinel-gateway/sentinel/internal/logx"
)

// target is one backend of a pool. Everything the request path reads or
// writes is an atomic; the rest is fixed at construction.
type target struct {
	pool   string
	url    string // as configured: the `target` metric label
	scheme []byte // "http" or "https"
	host   []byte // host[:port] as in the URL, the Host header when req has none
	hc     *fasthttp.HostClient
	dial   fasthttp.DialFuncWithTimeout // Pool.Dial's and the health checks' connections: socket deadlines
	// sweeper keeps the deadlines of hc's and the pipeline's connections.
	sweeper *deadline.Sweeper
	probe   *fasthttp.HostClient // health checks and re-probes, apart from hc's connections
	pipe    *pipeline            // nil unless upstreams.NAME.pipeline is set

	pending atomic.Int32 // requests in flight through this pool

	// healthy is the active health checks' verdict; true until they say
	// otherwise (and always true without checks).
	healthy   atomic.Bool
	probeRun  int // consecutive probe results agreeing with the last one (checker goroutine only)
	probeGood bool

	// ejectedUntil is the unix-nanosecond end of a passive ejection, 0 when
	// the target is not ejected. Once it has passed, the re-probe brings the
	// target back (or, when the Set is not started, time alone).
	ejectedUntil atomic.Int64
	fails        atomic.Int32 // consecutive passive failures
	ejectCh      chan struct{}
	failLimit    int32
	ejectFor     int64

	breaker *breaker
	m       *targetMetrics
	// onBodyCut is bodyCut, bound once (a method value made per request
	// would allocate).
	onBodyCut func(idle bool)
	// bodyIdle and bodyTimeout are the pool's, for the log line of a cut.
	bodyIdle, bodyTimeout time.Duration

	removal    *removal     // the pool's cap on targets held out
	outReasons atomic.Int32 // outEjected | outBreaker while held out
}

// newTarget is the target rawURL of pool: its clients, breaker and passive
// ejection as cfg sets them; rm is the pool's cap on targets held out.
func newTarget(pool, rawURL string, cfg *PoolConfig, rm *removal) *target {
	u, _ := url.Parse(rawURL) // validated by Config.Validate
	isTLS := u.Scheme == "https"
	addr := fasthttp.AddMissingPort(u.Host, isTLS)
	t := &target{
		pool:      pool,
		url:       rawURL,
		scheme:    []byte(u.Scheme),
		host:      []byte(u.Host),
		ejectCh:   make(chan struct{}, 1),
		failLimit: int32(cfg.Passive.Failures),
		ejectFor:  int64(cfg.Passive.EjectFor),
		m:         newTargetMetrics(pool, rawURL),
		removal:   rm,
	}
	t.dial = dialer(cfg.ConnectTimeout)
	// hc (and the pipeline) set a write and a read deadline on a connection
	// for every request: a sweeper keeps them without a runtime timer each,
	// at most a tenth of the pool timeout late.
	t.sweeper = deadline.NewSweeper(min(cfg.Timeout/10, time.Second))
	t.onBodyCut, t.bodyIdle, t.bodyTimeout = t.bodyCut, cfg.BodyIdleTimeout, cfg.BodyTimeout
	t.hc = t.newHostClient(addr, isTLS, cfg)
	t.probe = t.newProbeClient(addr, isTLS, cfg)
	if cfg.Pipeline > 0 {
		t.pipe = newPipeline(t, addr, isTLS, cfg)
	}
	t.healthy.Store(true)
	t.breaker = newBreaker(cfg.Breaker, t.breakerChanged)
	t.breaker.mayTrip = func() bool { return t.takeOut(outBreaker) }
	t.m.healthy.Set(1)
	t.m.breakerState.Set(float64(stateClosed))
	return t
}

// newHostClient is t's client for forwarded requests: its connections are
// dialled through t.dial and kept to their deadlines by t.sweeper.
func (t *target) newHostClient(addr string, isTLS bool, cfg *PoolConfig) *fasthttp.HostClient {
	hc := &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: isTLS,
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			c, err := t.dial(addr, timeout)
			if err != nil {
				return nil, err
			}
			return t.sweeper.Wrap(c), nil
		},
		MaxConns: cfg.MaxConns,
		// A request that finds every connection busy waits for one; its own
		// deadline (the pool timeout) ends the wait first.
		MaxConnWaitTimeout:  cfg.Timeout,
		MaxIdleConnDuration: cfg.MaxIdleConnDuration,
		// One more attempt on the same target for idempotent requests whose
		// pooled keep-alive connection turned out dead (fasthttp's retry).
		MaxIdemponentCallAttempts: 2,
		// The proxy forwards paths as the client sent them and adds no
		// User-Agent of its own.
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		ReadBufferSize:           8 << 10,
		// Responses are buffered unless the caller sets resp.StreamBody;
		// then the transport streams the large ones only: see Pool.Do.
		StreamResponseBody: false,
	}
	hc.Transport = newTransport(t, hc, cfg, hc.AcquireConn, hc.ReleaseConn, hc.CloseConn)
	return hc
}

// newProbeClient is t's client for health checks, apart from the forwarded
// requests' connections.
func (t *target) newProbeClient(addr string, isTLS bool, cfg *PoolConfig) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:                      addr,
		IsTLS:                     isTLS,
		DialTimeout:               t.dial,
		MaxConns:                  2,
		MaxIdleConnDuration:       cfg.MaxIdleConnDuration,
		MaxIdemponentCallAttempts: 1,
		NoDefaultUserAgentHeader:  true,
		Name:                      "sentinel-health-check",
	}
}

// dialer connects within connectTimeout (or the request's remaining time if
// shorter) and marks its failures as dialError.
func dialer(connectTimeout time.Duration) fasthttp.DialFuncWithTimeout {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		if timeout <= 0 || timeout > connectTimeout {
			timeout = connectTimeout
		}
		c, err := fasthttp.DialTimeout(addr, timeout)
		if err != nil {
			return nil, &dialError{err: err}
		}
		return c, nil
	}
}

// usable tells whether the balancer may pick t at now.
func (t *target) usable(now int64, watched bool) bool {
	if !t.healthy.Load() {
		return false
	}
	if u := t.ejectedUntil.Load(); u != 0 && (watched || now < u) {
		return false
	}
	return t.breaker.mayAdmit(now)
}

// observe records the result of one request that breaker admission trial let
// through.
func (t *target) observe(failed bool, trial int64, now int64) {
	t.breaker.record(failed, trial, now)
	if !failed {
		if t.fails.Load() != 0 {
			t.fails.Store(0)
		}
		if u := t.ejectedUntil.Load(); u != 0 && now >= u && t.ejectedUntil.CompareAndSwap(u, 0) {
			t.putBack(outEjected)
			t.updateHealthGauge() // back by time alone: the Set is not started
		}
		return
	}
	if t.fails.Add(1) >= t.failLimit {
		t.eject(now)
	}
}

// eject takes t out of rotation for ejectFor and wakes its re-prober,
// unless the pool's max_ejection_percent already holds enough targets out.
func (t *target) eject(now int64) {
	old := t.ejectedUntil.Load()
	if old != 0 && now < old {
		return // already out
	}
	if !t.takeOut(outEjected) {
		t.fails.Store(0)
		return
	}
	if !t.ejectedUntil.CompareAndSwap(old, now+t.ejectFor) {
		if old == 0 {
			t.putBack(outEjected)
		}
		return
	}
	t.fails.Store(0)
	t.m.ejections.Inc()
	t.updateHealthGauge()
	slog.Warn("upstream target ejected after consecutive failures",
		"upstream", t.pool, "target", t.url, "failures", t.failLimit, "eject_for", time.Duration(t.ejectFor))
	select {
	case t.ejectCh <- struct{}{}:
	default:
	}
}

// readmit brings an ejected target back on probation: its next failure
// ejects it again.
func (t *target) readmit() {
	t.fails.Store(t.failLimit - 1)
	t.ejectedUntil.Store(0)
	t.putBack(outEjected)
	t.updateHealthGauge()
	slog.Info("upstream target re-admitted after a passing re-probe", "upstream", t.pool, "target", t.url)
}

func (t *target) updateHealthGauge() {
	t.m.healthy.Set(boolGauge(t.healthy.Load() && t.ejectedUntil.Load() == 0))
}

func (t *target) breakerChanged(to int32) {
	if to == stateClosed {
		t.putBack(outBreaker)
	}
	t.m.breakerState.Set(float64(to))
	t.m.transitions[to].Inc()
	slog.Info("upstream breaker changed state", "upstream", t.pool, "target", t.url, "to", stateNames[to])
}

// cutLogs throttles the log lines of cut answers across all targets.
var cutLogs = logx.NewThrottle(5)

// bodyCut records an answer whose streamed body was cut: no bytes for
// body_idle_timeout (idle), or not whole by body_timeout. The head was
// counted as the target's success; the client got a truncated body.
func (t *target) bodyCut(idle bool) {
	reason, key, limit := "body_timeout", "body_timeout", t.bodyTimeout
	if idle {
		reason, key, limit = "body_idle", "body_idle_timeout", t.bodyIdle
	}
	if idle {
		t.m.cutIdle.Inc()
	} else {
		t.m.cutTotal.Inc()
	}
	if ok, suppressed := cutLogs.Allow(time.Now()); ok {
		slog.Warn("upstream answer cut: its body was not read whole within "+key,
			"upstream", t.pool, "target", t.url, "reason", reason, key, limit.String(), "suppressed", suppressed)
	}
}
