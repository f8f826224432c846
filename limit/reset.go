package limit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Reset makes key's budget whole again: the store drops its counts (p
// names a quota's period), then this pod forgets what it holds for the key
// (the other pods do when they hear of the reset).
func (l *Limiter) Reset(ctx context.Context, key []byte, p store.Params) error {
	if err := l.store.Reset(ctx, key, p); err != nil {
		return err
	}
	l.Forget(key)
	return nil
}

// Forget drops what this pod holds for key (leased permits, a cached
// refusal, reports due, the local share's counts): the store reset it.
func (l *Limiter) Forget(key []byte) {
	if b := l.table.find(key, true); b != nil {
		b.mu.Lock()
		b.permits, b.gen = 0, b.gen+1
		b.forgetRefusal()
		b.shareKind, b.localRef, b.unkept = 0, 0, true
		b.mu.Unlock()
	}
	_ = l.fallback.Reset(context.Background(), key, store.Params{})
}

// PolicyKey appends the store key of limit i of policy p, one of the
// `policies` section (PolicySet.Lookup's), for the budget of identity id
// (AppendIdentity's or AppendIdentityOf's), as the limiter builds it:
// {pol:<name>:<limit label>:<identity>} (CompiledPolicy.AppendKey).
func PolicyKey(dst []byte, p *catalog.CompiledPolicy, i int, id []byte) []byte {
	return p.AppendKey(dst, i, id, nil)
}

// scopeKeys name the store keys of the derived limits' budgets, as the
// limiter builds them (catalog.CompiledPolicy.AppendKey): "{ip:<ip>}",
// "{key:<api key>}", "{tenant:<id>}", "{rule:<tenant>:<resource>[:<ip>]}".
var scopeKeys = [...]string{ScopeIP: "ip", ScopeAPIKey: "key", ScopeTenant: "tenant", ScopeRule: "rule"}

// ScopeKey appends the store key of the budget of a derived limit's scope
// (ScopeIP, ScopeAPIKey, ScopeTenant or ScopeRule) whose key is made of
// parts: the IP in its text form, the API key, the tenant, or a rule's
// tenant and resource (and the client IP for the anonymous tenant's rule).
// Another scope has no such key: dst comes back as it was.
func ScopeKey(dst []byte, scope Scope, parts ...string) []byte {
	if int(scope) >= len(scopeKeys) || scopeKeys[scope] == "" {
		return dst
	}
	return store.AppendKeyStrings(dst, "", scopeKeys[scope], parts...)
}

// ResetBus publishes resets and hears them: every pod drops what it holds
// for a reset key (Limiter.Forget), its leased permits and a cached
// refusal, counted against a budget the store no longer holds. A message
// is not stored: a pod whose subscription is down when it is sent keeps
// its leased permits until they expire (a lease lifetime) and a cached
// refusal at most a second, then asks the store, which holds the reset
// budget. Without a client it is this process's alone: Publish applies
// the reset at once.
type ResetBus struct {
	channel string
	apply   func(key string)

	mu     sync.Mutex
	client rueidis.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// NewResetBus returns a bus on the channel <prefix>:resets (redis.key_prefix;
// "sentinel" when empty). apply is called with every reset's store key,
// this pod's too, on the subscription's reading goroutine: it must be
// quick. client may be nil (Attach gives it later).
func NewResetBus(client rueidis.Client, prefix string, apply func(key string)) *ResetBus {
	if prefix == "" {
		prefix = "sentinel"
	}
	return &ResetBus{client: client, channel: prefix + ":resets", apply: apply}
}

// Publish tells every pod that the counter of the store key was reset.
func (b *ResetBus) Publish(ctx context.Context, key string) error {
	b.mu.Lock()
	client := b.client
	b.mu.Unlock()
	if client == nil {
		b.apply(key)
		return nil
	}
	if err := client.Do(ctx, client.B().Publish().Channel(b.channel).Message(key).Build()).Error(); err != nil {
		return fmt.Errorf("limit: cannot publish the reset of %q on %s: %w", key, b.channel, err)
	}
	return nil
}

// Attach gives a bus built without a client its client and starts it.
func (b *ResetBus) Attach(client rueidis.Client) {
	b.mu.Lock()
	b.client = client
	b.mu.Unlock()
	b.Start()
}

// Start subscribes until Stop, and returns once subscribed (at most a
// second). rueidis resubscribes after a broken connection; a subscription
// that ends is made again after a pause.
func (b *ResetBus) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client == nil || b.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	subscribed := make(chan struct{}, 1)
	hook := rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) {
		select {
		case subscribed <- struct{}{}:
		default:
		}
	})
	go b.listen(hook, b.client, b.done)
	select {
	case <-subscribed:
	case <-time.After(time.Second):
	}
}

// listen receives the channel's messages until ctx ends.
func (b *ResetBus) listen(ctx context.Context, client rueidis.Client, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		cmd := client.B().Subscribe().Channel(b.channel).Build() // a built command is not reused
		_ = client.Receive(ctx, cmd, func(m rueidis.PubSubMessage) { b.apply(m.Message) })
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the subscription and waits for it.
func (b *ResetBus) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel = nil
	b.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
