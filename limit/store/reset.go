package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Reset deletes every key of key's limit, whatever its algorithm (it may
// have changed since they were written), in one DEL: they share key's hash
// tag, so the command touches one slot. A quota's counters of the current
// period and the one before go (a reset at the boundary finds either).
func (s *RedisStore) Reset(ctx context.Context, key []byte, p Params) error {
	keys := make([]string, 0, 7)
	for _, suffix := range []string{suffixSlidingWindow, suffixSlidingLog, suffixSlidingLogMeta, suffixSlidingLogIDs, suffixTokenBucket} {
		keys = append(keys, s.prefix+string(key)+suffix)
	}
	if p.Algorithm == Quota {
		at := s.clockOf(key).now(time.Now())
		start, _ := quotaBounds(at, &p)
		before, _ := quotaBounds(time.UnixMilli(start-1), &p)
		for _, from := range []int64{start, before} {
			keys = append(keys, s.prefix+string(key)+suffixQuota+p.Period.String()+":"+strconv.FormatInt(from, 10))
		}
	}
	if err := s.client.Do(ctx, s.client.B().Del().Key(keys...).Build()).Error(); err != nil {
		return fmt.Errorf("limit: redis reset of %q: %w", key, err)
	}
	return nil
}

// Reset drops key's entry.
func (s *MemoryStore) Reset(_ context.Context, key []byte, _ Params) error {
	sh := &s.shards[xxhash.Sum64(key)&s.mask]
	sh.mu.Lock()
	delete(sh.m, string(key))
	sh.mu.Unlock()
	return nil
}

// Reset resets key in the attached store; before Attach there is nothing
// to reset (ErrNotConnected).
func (s *LateStore) Reset(ctx context.Context, key []byte, p Params) error {
	st := s.cur.Load()
	if st == nil {
		return ErrNotConnected
	}
	return (*st).Reset(ctx, key, p)
}
