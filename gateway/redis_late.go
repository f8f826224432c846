package gateway

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// A pod whose Redis does not answer within redis.connect_wait starts
// anyway: it serves with the failure policy (limits.on_store_failure, the
// local share dividing each limit by limits.expected_pods), keeps
// connecting in the background and, once Redis answers, attaches the
// store, the adaptive cluster view and the catalog sync without a restart.

// redisConn is the connection state of a pod with Redis, as /metrics shows
// it.
type redisConn struct {
	store     *store.LateStore // nil: Redis answered at start
	set       *metrics.Set     // this pod's series, registered until close
	connected atomic.Bool      // sentinel_redis_connected
	loaded    atomic.Bool      // sentinel_catalog_loaded
	failures  *metrics.Counter // failed background connection attempts
}

func newRedisConn(connected bool) *redisConn {
	r := &redisConn{set: metrics.NewSet()}
	r.connected.Store(connected)
	r.set.NewGauge(`sentinel_redis_connected`, func() float64 {
		if r.connected.Load() {
			return 1
		}
		return 0
	})
	r.failures = r.set.NewCounter(`sentinel_redis_connect_failures_total`)
	r.set.NewGauge(`sentinel_catalog_loaded`, func() float64 {
		if r.loaded.Load() {
			return 1
		}
		return 0
	})
	metrics.RegisterSet(r.set)
	return r
}

func (r *redisConn) close() { metrics.UnregisterSet(r.set, true) }

// startWithout sets the pod up to start without its Redis.
func (a *Gateway) startWithout(err error) {
	slog.Warn("starting without redis: deciding per limits.on_store_failure and connecting in the background",
		"error", err, "on_store_failure", a.cfg.Limits.OnStoreFailure.String(), "expected_pods", a.cfg.Limits.ExpectedPods)
	a.conn.store = store.NewLateStore()
	a.store = a.conn.store
}

// pending reports whether the pod started without its Redis (and so runs
// attachLoop).
func (a *Gateway) pending() bool { return a.conn != nil && a.conn.store != nil }

// attachLoop connects to Redis until it answers or ctx ends, then attaches.
// Each failure counts in sentinel_redis_connect_failures_total; the log says
// when the error changes.
func (a *Gateway) attachLoop(ctx context.Context) {
	last := ""
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		client, err := store.NewRedisClient(a.cfg.Redis)
		if err == nil {
			a.attach(ctx, client)
			return
		}
		a.conn.failures.Inc()
		if err.Error() != last {
			last = err.Error()
			slog.Warn("redis does not answer yet; serving per limits.on_store_failure and retrying", "error", err)
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// attach makes client the pod's Redis: the store first (the limiters'
// breakers close on their next probe, and the permits spent while deciding
// alone are reported to it), then the adaptive cluster view, then the
// catalog sync, whose first load it retries until it works (loadCatalog).
func (a *Gateway) attach(ctx context.Context, client rueidis.Client) {
	a.redis = client // read by close only, once this goroutine has ended
	a.conn.store.Attach(store.NewRedisStore(client, store.RedisStoreOptions{KeyPrefix: a.cfg.Redis.KeyPrefix}))
	a.conn.connected.Store(true)
	slog.Info("redis answers: the store decides the limits from now on", "redis", a.storeName)
	a.adaptive.AttachRedis(client)
	a.resets.Attach(client)
	a.loadCatalog(ctx, client)
}

// loadLater is a start whose Redis answered but whose first load of the
// catalog failed (the master of its slot down, an error, a closed
// connection): the pod serves with the configuration file's rules and
// tenants, refuses writes through the API, and loads in the background.
func (a *Gateway) loadLater(ctx context.Context, err error) {
	slog.Warn("cannot load rules and tenants from redis: serving with the configuration file's and loading in the background",
		"error", err)
	a.sync.Await()
	client := a.redis
	a.attaching.Go(func() { a.loadCatalog(ctx, client) })
}

// loadCatalog starts the catalog sync on client, retrying its first load
// until it works or ctx ends (each failure counts in
// sentinel_catalog_sync_errors_total), and sets sentinel_catalog_loaded.
func (a *Gateway) loadCatalog(ctx context.Context, client rueidis.Client) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := a.sync.Attach(ctx, client)
		if err == nil {
			a.conn.loaded.Store(true)
			slog.Info("rules and tenants loaded from redis")
			return
		}
		slog.Warn("cannot load rules and tenants from redis yet; retrying", "error", err, "retry_in", wait.String())
		if !sleep(ctx, wait) {
			return
		}
	}
}

// sleep waits for d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// readyUnconnected is readiness before Redis ever answered: ready unless the
// failure policy refuses every request.
func (a *Gateway) readyUnconnected(onFailure limit.FailurePolicy) (bool, string) {
	reason := "store " + a.storeName + ": not connected since start"
	if onFailure == limit.FailClosed {
		return false, reason + " and limits.on_store_failure is closed"
	}
	return true, reason + "; deciding per limits.on_store_failure: " + onFailure.String() +
		" (local shares divide each limit by limits.expected_pods: " + strconv.Itoa(a.cfg.Limits.ExpectedPods) + ")"
}
