package catalog

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

// SyncOptions configures a Sync. Zero values take the defaults.
type SyncOptions struct {
	// KeyPrefix goes before every key, with a ':' (redis.key_prefix).
	// Default "sentinel": rules live in the hash sentinel:{catalog}:rules,
	// tenants in sentinel:{catalog}:tenants.
	KeyPrefix string
	// Resync is the period of the full reload that repairs a missed change
	// message. Default 5s.
	Resync time.Duration
	// Timeout bounds each Redis round trip. Default 2s.
	Timeout time.Duration
	// Logf logs reload failures (throttled to state changes). Default
	// log.Printf. A restore of the catalog is logged with slog.Warn.
	Logf func(format string, args ...any)
}

func (o *SyncOptions) setDefaults() {
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

// Sync keeps a Catalog equal on every pod: rules, tenants and
// policies written through the admin API are stored in Redis and applied by every pod within a
// second.
//
// Layout: the API's rules are the hash <prefix>:{catalog}:rules (field
// "<tenant>:<resource>", a JSON document), its tenants the hash
// <prefix>:{catalog}:tenants (field "<id>"), its policies the hash
// <prefix>:{catalog}:policies (field "<name>"), and <prefix>:{catalog}:gen is
// the catalog's generation, incremented by every write. Each write also scores
// the changed entry's name ("rule:<tenant>:<resource>", "tenant:<id>",
// "policy:<name>") with
// the new generation in the change log <prefix>:{catalog}:changes and
// publishes the name on <prefix>:catalog.
//
// Each pod subscribes, and on a message, on every (re)subscription and every
// Resync reads the entries changed since the generation it has seen (one
// script call: the names scored above it and their documents), so that a
// write costs every pod the entries it changed, not the whole catalog, and a
// burst of messages shares one read. The whole catalog is read only when the
// log cannot tell: at start, when Redis holds another epoch
// (<prefix>:{catalog}:epoch names the catalog's history; it changes when the
// catalog is restored or created anew), and when the pod is older than the
// log's floor (<prefix>:{catalog}:floor: the log drops its oldest names past
// a size, and a restore empties it). A missed message thus delays a change
// until the next message or Resync, never loses it.
//
// Redis losing its data: each pod remembers the newest generation it has
// read or written. A pod that finds Redis at an older generation (0 when the
// keys are gone) writes its own catalog back, atomically and only over an
// older one, instead of adopting the loss; a write through such a pod
// restores first. Of several pods restoring at once the newest snapshot
// wins, so an entry deleted at generation g never comes back from a pod that
// last saw g-1.
//
// The entries from config.yaml are the initial set and stay in the process:
// Redis holds only the API's writes, which override a config entry with the
// same name. Deleting an API entry restores the config entry of that name, or
// the default limits when there is none. Config entries themselves cannot be
// deleted through the API (ErrConfigEntry): change config.yaml.
//
// The writes and the reloads are serialized, so the catalog always holds the
// config entries overlaid with one consistent view of Redis.
type Sync struct {
	client rueidis.Client
	cat    *Catalog
	opts   SyncOptions

	baseRules   []Rule   // from config.yaml (SetBase changes them)
	baseTenants []Tenant // from config.yaml
	baseRule    map[ruleKey]Rule
	baseTenant  map[string]Tenant
	pol         policyState // the policies: the file's, the API's, their view

	// mu serializes writes and reloads, and guards rules, tenants and seen.
	mu      sync.Mutex
	rules   map[ruleKey]Rule  // API rules, as last read from Redis or written
	tenants map[string]Tenant // API tenants, by ID
	seen    int64             // newest generation read, written or restored
	epoch   string            // the history seen belongs to ("": none yet)
	failing bool              // the last reload failed (log throttling)
	// awaiting: the Redis did not answer yet; writes are refused (Await).
	awaiting bool

	changed chan struct{} // a change message arrived: re-read the catalog
	hello   string        // this sync's own subscription probe
	helloc  chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// ErrConfigEntry is returned by DeleteRule, DeleteTenant and DeletePolicy for an entry that
// comes from config.yaml: the API can override it but not delete it.
var ErrConfigEntry = errors.New("limit: the entry comes from config.yaml; override it with PUT or change the config")

var (
	syncReloadsChanges = metrics.NewCounter(`sentinel_catalog_reloads_total{kind="changes"}`)
	syncReloadsFull    = metrics.NewCounter(`sentinel_catalog_reloads_total{kind="full"}`)
	syncEntriesRead    = metrics.NewCounter(`sentinel_catalog_entries_read_total`)
	syncErrors         = metrics.NewCounter(`sentinel_catalog_sync_errors_total`)
	syncWrites         = metrics.NewCounter(`sentinel_catalog_writes_total`)
	syncRestores       = metrics.NewCounter(`sentinel_catalog_restores_total`)
)

// NewSync returns a sync between cat and Redis. With a nil client it
// keeps the same semantics (config entries as the base, API entries over
// them) in this process only. The catalog's current
// rules and tenants (those of config.yaml) become the base that Redis entries
// override. Nothing runs until Start.
func NewSync(client rueidis.Client, cat *Catalog, opts SyncOptions) *Sync {
	opts.setDefaults()
	s := &Sync{
		client:  client,
		cat:     cat,
		opts:    opts,
		rules:   map[ruleKey]Rule{},
		tenants: map[string]Tenant{},
		pol:     policyState{api: map[string]Policy{}, live: NewLivePolicies()},
		changed: make(chan struct{}, 1),
		helloc:  make(chan struct{}, 1),
	}
	s.setBase(cat.Tenants(), cat.Rules())
	return s
}

// setBase keeps the config entries, as lists and by name.
func (s *Sync) setBase(tenants []Tenant, rules []Rule) {
	s.baseTenants, s.baseRules = tenants, rules
	s.baseTenant = make(map[string]Tenant, len(tenants))
	for _, t := range tenants {
		s.baseTenant[t.ID] = t
	}
	s.baseRule = make(map[ruleKey]Rule, len(rules))
	for _, r := range rules {
		s.baseRule[ruleKey{r.Tenant, r.Resource}] = r
	}
}

// Await marks a sync built without a client as waiting for one: until
// Attach, writes fail with ErrNotConnected. Call it before any write.
func (s *Sync) Await() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaiting = true
}

// Attach gives an awaiting sync its client and starts it (see Start). When
// the first load fails it returns the error and may be called again.
func (s *Sync) Attach(ctx context.Context, client rueidis.Client) error {
	s.mu.Lock()
	s.client = client
	s.mu.Unlock()
	if err := s.Start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaiting = false
	return nil
}

// Start loads the rules and tenants from Redis into the catalog, subscribes
// to the change channel and starts the periodic resync. It returns an error
// (counted in sentinel_catalog_sync_errors_total) when the first load fails;
// the background work stops with ctx or Stop.
func (s *Sync) Start(ctx context.Context) error {
	if s.client == nil {
		return nil // in-process only: nothing to load or follow
	}
	syncReloadsFull.Inc()
	if err := s.reload(ctx); err != nil {
		syncErrors.Inc()
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
func (s *Sync) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

// waitSubscribed publishes a probe until this pod's subscription receives it
// (up to 2s), so that changes written after Start are not missed. If it never
// arrives, the periodic resync still applies every change.
func (s *Sync) waitSubscribed(ctx context.Context) {
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

// subscribe listens to the change channel. rueidis resubscribes by itself
// after a broken connection; every subscription (the first one too) asks a
// reload, since messages sent meanwhile are lost and a Redis that restarted
// empty must be restored at once, not at the next resync.
func (s *Sync) subscribe(ctx context.Context) {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	rctx := rueidis.WithOnSubscriptionHook(ctx, func(sub rueidis.PubSubSubscription) {
		if sub.Kind == "subscribe" {
			s.notify() // runs on rueidis' pipeline goroutine: it only signals
		}
	})
	for ctx.Err() == nil {
		err := s.client.Receive(rctx, s.client.B().Subscribe().Channel(s.channel()).Build(), s.onMessage)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			syncErrors.Inc()
		}
		s.notify()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// onMessage runs on rueidis' reading goroutine: it only signals.
func (s *Sync) onMessage(m rueidis.PubSubMessage) {
	if strings.HasPrefix(m.Message, "hello:") {
		if m.Message == s.hello {
			select {
			case s.helloc <- struct{}{}:
			default:
			}
		}
		return
	}
	s.notify()
}

// notify asks a reload; messages that arrive before it runs share it.
func (s *Sync) notify() {
	select {
	case s.changed <- struct{}{}:
	default: // a reload is already due
	}
}

// run applies change messages and the periodic resync, one at a time. A
// failed reload is retried soon (from 100ms, doubling up to Resync): the
// first command after Redis restarts meets the dead connection, and a Redis
// that came back empty should be restored at once.
func (s *Sync) run(ctx context.Context) {
	defer s.wg.Done()
	tick := time.NewTicker(s.opts.Resync)
	defer tick.Stop()
	const firstRetry = 100 * time.Millisecond
	backoff := firstRetry
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case <-tick.C:
		case <-retry:
		}
		err := s.update(ctx)
		s.noteResult(err)
		retry = nil
		if err != nil {
			retry = time.After(backoff)
			backoff = min(2*backoff, s.opts.Resync)
		} else {
			backoff = firstRetry
		}
	}
}

// noteResult counts failures and logs only when the state changes.
func (s *Sync) noteResult(err error) {
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

func (s *Sync) channel() string { return s.opts.KeyPrefix + ":catalog" }

// keys are the catalog's keys, in the order every catalog script takes
// them: rules hash, tenants hash, generation, change log, its floor, epoch,
// policies hash.
// They share the hash tag {catalog}, so that each script touches one slot.
func (s *Sync) keys() []string {
	p := s.opts.KeyPrefix + ":{catalog}:"
	return []string{p + "rules", p + "tenants", p + "gen", p + "changes", p + "floor", p + "epoch", p + "policies"}
}

// maxChangeLog is the change log's size past which its oldest names go: a
// pod that saw none of the remaining ones reads the whole catalog.
const maxChangeLog = 100_000

// ruleEntry, tenantEntry and policyEntry name entries in change messages; ruleField is a
// rule's field in the rules hash. A tenant ID never contains ':'
// (checkSyncID).
func ruleEntry(tenant, resource string) string { return "rule:" + ruleField(tenant, resource) }
func ruleField(tenant, resource string) string { return tenant + ":" + resource }
func tenantEntry(id string) string             { return "tenant:" + id }
func policyEntry(name string) string           { return "policy:" + name }

// checkSyncID rejects tenant IDs that would make entry names ambiguous.
func checkSyncID(field, id string) error {
	if strings.ContainsAny(id, ":{}") {
		return &ValidationError{Field: field, Msg: fmt.Sprintf("%q contains ':', '{' or '}', which Redis key names reserve", id)}
	}
	return nil
}
