package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRedisSlots measures one acquire of a slot and its release (two
// script calls) on one hot key shared by 3 pods: redis-µs/op is the
// scripts' Redis CPU time per op (INFO commandstats), without the round
// trips.
func BenchmarkRedisSlots(b *testing.B) {
	s, client := benchRedisStore(b)
	ctx := context.Background()
	key := AppendKeyStrings(nil, "", "bench", "slots")
	pods := [3]string{"pod-a", "pod-b", "pod-c"}
	acquire := &SlotRequest{Key: key, Limit: MaxLimit, Want: 1, TTL: time.Second}
	release := &SlotRequest{Key: key, Limit: MaxLimit, Release: 1, TTL: time.Second}
	b.ReportAllocs()
	calls0, usec0 := scriptStats(b, client)
	for i := 0; b.Loop(); i++ {
		acquire.Pod, release.Pod = pods[i%3], pods[i%3]
		if r, err := s.Slots(ctx, acquire); err != nil || r.Granted != 1 {
			b.Fatal(r, err)
		}
		if _, err := s.Slots(ctx, release); err != nil {
			b.Fatal(err)
		}
	}
	calls, usec := scriptStats(b, client)
	b.ReportMetric(2*float64(usec-usec0)/float64(max(calls-calls0, 1)), "redis-µs/op")
}
