// Package resets carries counter resets to every pod. The pod that resets
// a counter (DELETE /v1/counters) deletes it in the store and publishes its
// store key on <prefix>:resets; every pod subscribes and drops what it
// holds for the key (its leased permits, a cached refusal), which were
// counted against the budget the store no longer holds.
//
// A message is not stored: a pod whose subscription is down when it is
// sent keeps its leased permits until they expire (a lease lifetime) and a
// cached refusal at most a second, then asks the store, which holds the
// reset budget.
package resets

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Bus publishes resets and hears them. Without a client it is this
// process's alone: Publish calls Apply at once.
type Bus struct {
	channel string
	apply   func(key string)

	mu     sync.Mutex
	client rueidis.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a bus on the channel <prefix>:resets (redis.key_prefix;
// "sentinel" when empty). apply is called with every reset's store key,
// this pod's too, on the subscription's reading goroutine: it must be
// quick. client may be nil (Attach gives it later).
func New(client rueidis.Client, prefix string, apply func(key string)) *Bus {
	if prefix == "" {
		prefix = "sentinel"
	}
	return &Bus{client: client, channel: prefix + ":resets", apply: apply}
}

// Publish tells every pod that the counter of the store key was reset.
func (b *Bus) Publish(ctx context.Context, key string) error {
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
func (b *Bus) Attach(client rueidis.Client) {
	b.mu.Lock()
	b.client = client
	b.mu.Unlock()
	b.Start()
}

// Start subscribes until Stop, and returns once subscribed (at most a
// second). rueidis resubscribes after a broken connection; a subscription
// that ends is made again after a pause.
func (b *Bus) Start() {
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
func (b *Bus) listen(ctx context.Context, client rueidis.Client, done chan struct{}) {
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
func (b *Bus) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel = nil
	b.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
