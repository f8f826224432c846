package limit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"
)

// CatalogSyncOptions configures a CatalogSync. Zero values take the defaults.
type CatalogSyncOptions struct {
	// KeyPrefix goes before every key, with a ':' (redis.key_prefix).
	// Default "sentinel": rules live at sentinel:rule:{tenant}:{resource},
	// tenants at sentinel:tenant:{id}.
	KeyPrefix string
	// Resync is the period of the full reload that repairs a missed change
	// message. Default 5s.
	Resync time.Duration
	// Timeout bounds each Redis round trip. Default 2s.
	Timeout time.Duration
	// Logf logs reload failures (throttled to state changes). Default log.Printf.
	Logf func(format string, args ...any)
}

func (o *CatalogSyncOptions) setDefaults() {
	if o.KeyPrefix == "" {
		o.KeyPrefix = "sentinel"
	}
	if o.Resync <= 0 {
		o.Resync = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
}

// CatalogSync keeps a Catalog equal on every pod: rules and tenants written
// through the admin API are stored in Redis and applied by every pod within a
// second.
//
// Layout: each rule is a JSON document at <prefix>:rule:<tenant>:<resource>,
// each tenant at <prefix>:tenant:<id>; the sets <prefix>:rules and
// <prefix>:tenants index them; every write publishes the changed entry's name
// ("rule:<tenant>:<resource>", "tenant:<id>") on <prefix>:catalog. Each pod
// subscribes, reloads the named entry, and reloads everything every Resync
// so that a missed message cannot leave it stale.
//
// The entries from config.yaml are the initial set and stay in the process:
// Redis holds only the API's writes, which override a config entry with the
// same name. Deleting an API entry restores the config entry of that name, or
// the default limits when there is none. Config entries themselves cannot be
// deleted through the API (ErrConfigEntry): change config.yaml.
//
// The writes and the reloads are serialized, so the catalog always holds the
// config entries overlaid with one consistent view of Redis.
type CatalogSync struct {
	client rueidis.Client
	cat    *Catalog
	opts   CatalogSyncOptions

	baseRules   []Rule   // from config.yaml, never changed
	baseTenants []Tenant // from config.yaml, never changed

	// mu serializes writes and reloads, and guards rules and tenants.
	mu      sync.Mutex
	rules   map[ruleName]Rule // API rules, as last read from Redis or written
	tenants map[string]Tenant // API tenants, by ID
	failing bool              // the last reload failed (log throttling)

	events chan string // entry names from the channel; "" asks a full reload
	hello  string      // this sync's own subscription probe
	helloc chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ErrConfigEntry is returned by DeleteRule and DeleteTenant for an entry that
// comes from config.yaml: the API can override it but not delete it.
var ErrConfigEntry = errors.New("limit: the entry comes from config.yaml; override it with PUT or change the config")

var (
	syncReloadsMessage = metrics.NewCounter(`sentinel_catalog_reloads_total{kind="message"}`)
	syncReloadsFull    = metrics.NewCounter(`sentinel_catalog_reloads_total{kind="full"}`)
	syncErrors         = metrics.NewCounter(`sentinel_catalog_sync_errors_total`)
	syncWrites         = metrics.NewCounter(`sentinel_catalog_writes_total`)
)

// NewCatalogSync returns a sync between cat and Redis. With a nil client it
// keeps the same semantics (config entries as the base, API entries over
// them) in this process only. The catalog's current
// rules and tenants (those of config.yaml) become the base that Redis entries
// override. Nothing runs until Start.
func NewCatalogSync(client rueidis.Client, cat *Catalog, opts CatalogSyncOptions) *CatalogSync {
	opts.setDefaults()
	return &CatalogSync{
		client:      client,
		cat:         cat,
		opts:        opts,
		baseRules:   cat.Rules(),
		baseTenants: cat.Tenants(),
		rules:       map[ruleName]Rule{},
		tenants:     map[string]Tenant{},
		events:      make(chan string, 256),
		helloc:      make(chan struct{}, 1),
	}
}

// Start loads the rules and tenants from Redis into the catalog, subscribes
// to the change channel and starts the periodic resync. It returns an error
// when the first load fails; the background work stops with ctx or Stop.
func (s *CatalogSync) Start(ctx context.Context) error {
	if s.client == nil {
		return nil // in-process only: nothing to load or follow
	}
	if err := s.reloadAll(ctx); err != nil {
		return err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.hello = "hello:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.wg.Add(2)
	go s.subscribe(ctx)
	go s.run(ctx)
	s.waitSubscribed(ctx)
	return nil
}

// Stop ends the background work and waits for it.
func (s *CatalogSync) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

// waitSubscribed publishes a probe until this pod's subscription receives it
// (up to 2s), so that changes written after Start are not missed. If it never
// arrives, the periodic resync still applies every change.
func (s *CatalogSync) waitSubscribed(ctx context.Context) {
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		s.client.Do(c, s.client.B().Publish().Channel(s.channel()).Message(s.hello).Build())
		cancel()
		select {
		case <-s.helloc:
			return
		case <-ctx.Done():
			return
		case <-deadline.C:
			s.opts.Logf("limit: catalog sync: no confirmation of the subscription to %s; relying on the %v resync", s.channel(), s.opts.Resync)
			return
		case <-tick.C:
		}
	}
}

// subscribe listens to the change channel, resubscribing after a broken
// connection; each (re)subscription asks a full reload, since messages sent
// meanwhile are lost.
func (s *CatalogSync) subscribe(ctx context.Context) {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := s.client.Receive(ctx, s.client.B().Subscribe().Channel(s.channel()).Build(), s.onMessage)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			syncErrors.Inc()
		}
		s.enqueue("")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// onMessage runs on rueidis' reading goroutine: it only queues.
func (s *CatalogSync) onMessage(m rueidis.PubSubMessage) {
	if strings.HasPrefix(m.Message, "hello:") {
		if m.Message == s.hello {
			select {
			case s.helloc <- struct{}{}:
			default:
			}
		}
		return
	}
	s.enqueue(m.Message)
}

// enqueue queues a reload; when the queue is full it asks a full reload,
// which covers every queued entry.
func (s *CatalogSync) enqueue(name string) {
	select {
	case s.events <- name:
	default:
		select {
		case s.events <- "":
		default: // a full reload is already due
		}
	}
}

// run applies queued changes and the periodic resync, one at a time.
func (s *CatalogSync) run(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(s.opts.Resync)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case name := <-s.events:
			if name == "" {
				err = s.reloadAll(ctx)
			} else {
				err = s.reloadEntry(ctx, name)
			}
		case <-tick.C:
			err = s.reloadAll(ctx)
		}
		s.noteResult(err)
	}
}

// noteResult counts failures and logs only when the state changes.
func (s *CatalogSync) noteResult(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && !s.failing:
		s.failing = true
		s.opts.Logf("limit: catalog sync: %v (retrying every %v)", err, s.opts.Resync)
	case err == nil && s.failing:
		s.failing = false
		s.opts.Logf("limit: catalog sync: reloading from redis works again")
	}
	if err != nil {
		syncErrors.Inc()
	}
}

func (s *CatalogSync) channel() string { return s.opts.KeyPrefix + ":catalog" }
func (s *CatalogSync) key(name string) string {
	return s.opts.KeyPrefix + ":" + name
}
func (s *CatalogSync) rulesIndex() string   { return s.opts.KeyPrefix + ":rules" }
func (s *CatalogSync) tenantsIndex() string { return s.opts.KeyPrefix + ":tenants" }

// ruleEntry and tenantEntry name entries as the index sets and the channel
// carry them. A tenant ID never contains ':' (checkSyncID), so
// "rule:<tenant>:<resource>" splits at its second ':'.
func ruleEntry(tenant, resource string) string { return "rule:" + tenant + ":" + resource }
func tenantEntry(id string) string             { return "tenant:" + id }

// checkSyncID rejects tenant IDs that would make entry names ambiguous.
func checkSyncID(field, id string) error {
	if strings.ContainsAny(id, ":{}") {
		return &ValidationError{Field: field, Msg: fmt.Sprintf("%q contains ':', '{' or '}', which Redis key names reserve", id)}
	}
	return nil
}
