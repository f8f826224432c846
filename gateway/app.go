package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/admin"
	"github.com/sentinel-gateway/sentinel/cache"
	"github.com/sentinel-gateway/sentinel/docs"
	"github.com/sentinel-gateway/sentinel/internal/logx"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/proxy"
	"github.com/sentinel-gateway/sentinel/rls"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// Options are what a gateway takes besides its configuration.
type Options struct {
	// Load re-reads the configuration for a reload (SIGHUP, POST
	// /v1/reload); nil refuses reloads.
	Load func() (*Config, error)
	// LogLevel is the level a reload of log.level changes (nil: none).
	LogLevel *slog.LevelVar
	// OnDecision, when set, sees every limit decision with the instants the
	// limiter was entered and returned: the decision was made between
	// them. It runs on the request path and must be quick (the fault suite
	// records admissions with it).
	OnDecision func(req *limit.Request, d limit.Decision, from, to time.Time)
	// Store, when set and redis.addrs is empty, is the store the limits
	// are counted in instead of a new in-memory one (a process that embeds
	// the gateway and reads the store itself; the fault suite floods it).
	// The gateway closes it.
	Store *store.MemoryStore
	// PodID names this gateway in the pods' heartbeats in Redis; empty:
	// the host's name and the process ID (numbered after the first gateway
	// of the process). A pod that starts again under the name it had (a
	// container restarted in its pod) takes its heartbeat over; under a new
	// name, the others count the old one for PartitionHold when it could
	// not leave (Redis unreachable at its shutdown).
	PodID string
}

// Gateway holds the wired parts of one gateway process.
type Gateway struct {
	cfg       *Config
	redis     rueidis.Client // nil: the embedded in-memory store, or not connected yet
	store     store.Store    // a *store.LateStore when Redis did not answer at start
	storeName string
	catalog   *catalog.Catalog
	sync      *catalog.Sync   // in-process only without Redis
	resets    *limit.ResetBus // counter resets to and from every pod
	adaptive  *adaptive.Controller
	limiter   *liveLimiter
	upstreams *upstream.Set
	cache     *cache.Cache
	proxy     *proxy.Server
	admin     *admin.Server
	rls       *rls.Server // nil: grpc.listen is off
	grpcAddr  net.Addr    // where rls listens, once serving
	cancel    context.CancelFunc
	errc      chan error
	// conn is the Redis connection's state (nil without Redis); with a
	// store, the pod started without its Redis and attachLoop connects it.
	conn      *redisConn
	attaching sync.WaitGroup // attachLoop

	opts     Options
	reloadMu sync.Mutex  // serializes reloads; guards cfg's reloadable sections
	draining atomic.Bool // SIGTERM arrived: /readyz answers 503
	// onStoreFailure is limits.on_store_failure as /readyz reads it, set
	// at start and by every reload that changes the limits (readiness
	// probes do not wait for a reload's lock).
	onStoreFailure atomic.Pointer[limit.FailurePolicy]
}

// New wires the parts; nothing listens or runs in the background yet. On
// an error, what was built is closed again.
func New(cfg *Config, opts Options) (_ *Gateway, err error) {
	metrics.ExposeMetadata(true) // # HELP and # TYPE lines on /metrics, as Prometheus tools expect
	a := &Gateway{cfg: cfg, opts: opts, errc: make(chan error, 2)}
	defer func() {
		if err != nil {
			a.closeServers()
			a.close()
		}
	}()
	if err = a.buildLimits(cfg); err != nil {
		return nil, err
	}
	if a.upstreams, err = upstream.New(cfg.Upstreams); err != nil {
		return nil, err
	}
	if a.adaptive, err = adaptive.New(cfg.Adaptive, adaptive.Options{
		Redis: a.redis, KeyPrefix: cfg.Redis.KeyPrefix, PodID: opts.podID(), Upstreams: a.upstreams.Names(),
		Logf: logx.Printf(slog.LevelInfo), AwaitRedis: a.pending(), AssumedPods: cfg.Limits.ExpectedPods,
		KeepBeats: limit.PartitionHold,
		// a.limiter is set below, before the exchanges start (Start).
		OnBack: func() {
			if a.limiter != nil {
				// The heartbeat goes out a fifth of an interval later, and
				// the others, holding this pod's share, read the heartbeats
				// a fifth of an interval apart (adaptive.Options.OnBack).
				a.limiter.StoreReachable(2 * cfg.Adaptive.ClusterInterval)
			}
		},
	}); err != nil {
		return nil, err
	}
	a.onStoreFailure.Store(&cfg.Limits.OnStoreFailure)
	l, err := a.newLimiter(cfg.Limits, nil)
	if err != nil {
		return nil, err
	}
	a.limiter = newLiveLimiter(l)
	if opts.OnDecision != nil {
		obs := decisionObserver(opts.OnDecision)
		a.limiter.observe.Store(&obs)
	}
	a.cache = cache.New(cfg.Cache)
	if err = a.buildServers(cfg); err != nil {
		return nil, err
	}
	markLoaded(time.Now())
	return a, nil
}

// buildLimits connects the store (Redis, or the in-memory one without
// addrs) and builds the catalog and its sync. A Redis that does not answer
// within redis.connect_wait leaves a store that is not connected yet, and
// serve connects it in the background (see attach).
func (a *Gateway) buildLimits(cfg *Config) (err error) {
	if len(cfg.Redis.Addrs) > 0 {
		a.storeName = "redis " + fmt.Sprint(cfg.Redis.Addrs)
		a.redis, err = connectRedis(cfg.Redis)
		a.conn = newRedisConn(err == nil)
		if err != nil {
			a.startWithout(err)
		} else {
			a.store = store.NewRedisStore(a.redis, store.RedisStoreOptions{KeyPrefix: cfg.Redis.KeyPrefix})
		}
	} else {
		a.store, a.storeName = a.opts.Store, "in-memory"
		if a.opts.Store == nil {
			a.store = store.NewMemoryStore(store.MemoryOptions{MaxKeys: cfg.Limits.MaxKeys})
		}
	}
	if a.catalog, err = catalog.NewCatalog(cfg.Plans, cfg.Tenants, cfg.Rules); err != nil {
		return err
	}
	a.catalog.SetRouteResources(routeResources(cfg.Proxy.Routes))
	// Without Redis the sync keeps the same rules semantics in the process.
	a.sync = catalog.NewSync(a.redis, a.catalog, catalog.SyncOptions{
		KeyPrefix: cfg.Redis.KeyPrefix, Logf: logx.Printf(slog.LevelWarn),
	})
	// The limiter is built after the bus; a reset heard before it finds
	// nothing to drop.
	a.resets = limit.NewResetBus(a.redis, cfg.Redis.KeyPrefix, func(key string) {
		if a.limiter != nil {
			a.limiter.Forget(key)
		}
	})
	// The sync compiles the file's policies with the API's over them.
	if err := a.sync.SetPolicyBase(cfg.Policies, cfg.Limits.CatalogDefaults()); err != nil {
		return err
	}
	if a.pending() {
		a.sync.Await()
	}
	return nil
}

// buildServers builds the proxy, the admin listener and, when configured,
// the Envoy rate limit service.
func (a *Gateway) buildServers(cfg *Config) (err error) {
	if a.proxy, err = proxy.New(proxy.Deps{
		Config:         cfg.Proxy,
		Limiter:        a.limiter,
		Tenants:        a.catalog,
		Adaptive:       a.adaptive,
		Upstreams:      a.upstreams,
		Cache:          a.cache,
		AccessLog:      accessLogger(cfg.Log),
		AccessRefusals: cfg.Log.AccessRefusals,
	}); err != nil {
		return err
	}
	if a.admin, err = admin.New(a.adminDeps()); err != nil {
		return err
	}
	if cfg.GRPC.Enabled() {
		a.rls, err = rls.New(rls.Deps{Config: cfg.GRPC, Limiter: a.limiter, Catalog: a.catalog})
	}
	return err
}

// closeServers releases the servers build made when a later part failed:
// they never listened, but the proxy's metrics are registered from its
// construction, and a second gateway in the process (a retry, a test)
// would write its families twice.
func (a *Gateway) closeServers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.proxy != nil {
		_ = a.proxy.Shutdown(ctx)
	}
	if a.rls != nil {
		_ = a.rls.Shutdown(ctx)
	}
}

// accessLogger is the logger of the access log, nil when log.access is off.
func accessLogger(cfg logx.Config) *slog.Logger {
	if !cfg.Access {
		return nil
	}
	return slog.Default()
}

// newLimiter builds a limiter of the limits section over the app's store,
// going on from what prev (the limiter it replaces, or nil) knows of the
// keys. It decides with the sync's policies (the file's and the API's),
// which change under it without a new limiter.
func (a *Gateway) newLimiter(cfg limit.Config, prev *limit.Limiter) (*limit.Limiter, error) {
	return limit.NewLimiter(cfg, a.store, limit.Options{
		Adjuster: a.adaptive, LivePods: a.adaptive.LivePods, RecentPods: a.adaptive.RecentPods, SuspectPods: a.adaptive.SuspectPods, Catalog: a.catalog, Policies: a.sync.PolicySet(), Succeeds: prev,
		PeerNotice: a.cfg.Adaptive.PressureTTL + 2*a.cfg.Adaptive.ClusterInterval, HeartbeatAt: a.adaptive.HeartbeatAt, HeartbeatTTL: a.cfg.Adaptive.PressureTTL,
		HeartbeatEvery: a.cfg.Adaptive.ClusterInterval,
	})
}

// start listens on server.listen and server.admin_listen (and grpc.listen,
// in serve), then runs the background loops and serves.
func (a *Gateway) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Proxy.Server.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen on server.listen %q: %w", a.cfg.Proxy.Server.Listen, err)
	}
	adminLn, err := net.Listen("tcp", a.cfg.Admin.Listen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("cannot listen on server.admin_listen %q: %w", a.cfg.Admin.Listen, err)
	}
	return a.Serve(ctx, ln, adminLn)
}

// serve runs the background loops and serves the proxy on ln, the admin
// API on adminLn (tests pass listeners on free ports) and, when it is on,
// Envoy's rate limit service on grpc.listen.
func (a *Gateway) Serve(ctx context.Context, ln, adminLn net.Listener) error {
	var grpcLn net.Listener
	if a.rls != nil {
		var err error
		if grpcLn, err = net.Listen("tcp", a.cfg.GRPC.Listen); err != nil {
			ln.Close()
			adminLn.Close()
			return fmt.Errorf("cannot listen on grpc.listen %q: %w", a.cfg.GRPC.Listen, err)
		}
		a.grpcAddr = grpcLn.Addr()
	}
	ctx, a.cancel = context.WithCancel(ctx)
	a.resets.Start()
	if err := a.sync.Start(ctx); err != nil {
		a.loadLater(ctx, err)
	} else if a.conn != nil && !a.pending() {
		a.conn.loaded.Store(true)
	}
	a.upstreams.Start(ctx)
	a.adaptive.Start(ctx)
	if a.pending() {
		a.attaching.Go(func() { a.attachLoop(ctx) })
	}
	go func() { a.errc <- fmt.Errorf("proxy: %w", a.proxy.Serve(ln)) }()
	go func() { a.errc <- fmt.Errorf("admin: %w", a.admin.Serve(adminLn)) }()
	if grpcLn != nil {
		go func() {
			if err := a.rls.Serve(grpcLn); err != nil {
				a.errc <- fmt.Errorf("grpc: %w", err)
			}
		}()
	}
	return nil
}

// shutdown stops accepting, drains in-flight requests until ctx ends, then
// stops the background loops and closes the store.
func (a *Gateway) Shutdown(ctx context.Context) error {
	err := errors.Join(a.proxy.Shutdown(ctx), a.admin.Shutdown(ctx))
	if a.rls != nil {
		err = errors.Join(err, a.rls.Shutdown(ctx))
	}
	a.close()
	return err
}

func (a *Gateway) close() {
	if a.cancel != nil {
		a.cancel()
	}
	a.attaching.Wait()
	if a.conn != nil {
		a.conn.close()
	}
	if a.sync != nil {
		a.sync.Stop()
	}
	if a.resets != nil {
		a.resets.Stop()
	}
	if a.limiter != nil {
		a.limiter.Close()
	}
	if a.catalog != nil {
		a.catalog.Close()
	}
	if a.adaptive != nil {
		a.adaptive.Stop()
	}
	if a.upstreams != nil {
		a.upstreams.Stop()
	}
	if a.cache != nil {
		a.cache.Close()
	}
	if a.store != nil {
		a.store.Close()
	}
	if a.redis != nil {
		a.redis.Close()
	}
}

// podSeq numbers the gateways built in this process after the first.
var podSeq atomic.Int64

// podID is o.PodID, else podID().
func (o *Options) podID() string {
	if o.PodID != "" {
		return o.PodID
	}
	return podID()
}

// podID names this gateway in the cluster view: host name and process ID,
// and a sequence number for every gateway after the first that the process
// builds (several in one process must count as several pods).
func podID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "pod"
	}
	id := host + "-" + strconv.Itoa(os.Getpid())
	if n := podSeq.Add(1); n > 1 {
		id += "-" + strconv.FormatInt(n, 10)
	}
	return id
}

// adminDeps are the parts the admin listener serves.
func (a *Gateway) adminDeps() admin.Deps {
	return admin.Deps{
		Config:   a.cfg.Admin,
		Limiter:  a.limiter,
		Catalog:  a.catalog,
		Writer:   a.sync,
		Resets:   a.resets,
		Adaptive: a.adaptive,
		Ready:    a.ready,
		Reload:   a.Reload,

		MetricsHelp: metricsHelp,
		// identity.trust_request_id: the check API caller's IDs are
		// trusted unless it is none.
		TrustRequestID: a.cfg.Proxy.Identity.TrustsCheckRequestID(),
	}
}

// ready says whether the pod may take traffic: the configuration is loaded
// (it is, or the process would not run), and the store answers or the
// failure policy lets the pod decide without it.
func (a *Gateway) ready(ctx context.Context) (bool, string) {
	if a.draining.Load() {
		return false, "draining: shutting down, finishing in-flight requests"
	}
	err := a.store.Ping(ctx)
	onFailure := *a.onStoreFailure.Load()
	if errors.Is(err, store.ErrNotConnected) {
		return a.readyUnconnected(onFailure)
	}
	switch {
	case err == nil:
		return true, "store " + a.storeName + " answers"
	case onFailure == limit.FailClosed:
		return false, fmt.Sprintf("store %s does not answer (%v) and limits.on_store_failure is closed", a.storeName, err)
	default:
		return true, fmt.Sprintf("store %s does not answer (%v); deciding per limits.on_store_failure: %v",
			a.storeName, err, onFailure)
	}
}

// connectRedis connects, retrying for redis.connect_wait while Redis does not
// answer yet, so that a pod and its Redis may start together. When it gives
// up, the pod starts without Redis and connects in the background.
func connectRedis(cfg store.RedisConfig) (rueidis.Client, error) {
	deadline := time.Now().Add(cfg.ConnectWait)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		client, err := store.NewRedisClient(cfg)
		if err == nil {
			return client, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("%w (gave up after redis.connect_wait %v)", err, cfg.ConnectWait)
		}
		slog.Warn("redis does not answer yet; retrying", "error", err, "retry_in", wait.String(), "until", "redis.connect_wait")
		time.Sleep(wait)
	}
}

// drain turns /readyz to 503 at once and keeps serving for delay, so that
// load balancers stop sending before the listeners close; meanwhile every
// proxied answer carries Connection: close, so that clients move from the
// kept-alive connections the shutdown would close to new ones.
func (a *Gateway) Drain(delay *time.Duration) {
	a.draining.Store(true)
	a.proxy.Drain() // every answer closes its connection from now on
	d := time.Duration(0)
	if delay != nil {
		d = *delay
	}
	slog.Info("draining: /readyz answers 503; still serving", "drain_delay", d.String())
	if d > 0 {
		time.Sleep(d)
	}
}

// metricsHelp is the help text of each metric, from docs/metrics.md.
var metricsHelp = admin.MetricsHelp(docs.Metrics)

// Errors delivers a listener's failure while the gateway serves.
func (a *Gateway) Errors() <-chan error { return a.errc }

// GRPCAddr is where the Envoy rate limit service listens once serving (nil
// when grpc.listen is off).
func (a *Gateway) GRPCAddr() net.Addr { return a.grpcAddr }

// StoreName names the store the limits are counted in ("in-memory", or
// "redis [addrs]").
func (a *Gateway) StoreName() string { return a.storeName }
