//go:build !race

package adaptive

import (
	"testing"
	"time"
)

func TestRequestPathAllocatesNothing(t *testing.T) {
	c, err := New(provisioned(Config{}), Options{PodID: "p", Upstreams: []string{"api"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	l := c.Concurrency("api")
	n := testing.AllocsPerRun(1000, func() {
		_ = c.Policy()
		_, _ = c.LimitAdjustment()
		c.RequestStarted(0)
		tk, ok := l.Acquire(PriorityPremium, 0)
		if !ok {
			t.Fatal("shed")
		}
		now := time.Now()
		tk.Release(now, time.Millisecond, OK)
		c.ObserveUpstream(0, now, time.Millisecond, OK)
		c.RequestFinished(0)
	})
	if n != 0 {
		t.Fatalf("the request path allocates %.1f times", n)
	}
}

func BenchmarkPolicy(b *testing.B) {
	c, _ := New(provisioned(Config{}), Options{PodID: "p"})
	b.Cleanup(c.Stop)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Policy()
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	c, _ := New(provisioned(Config{}), Options{PodID: "p", Upstreams: []string{"api"}})
	b.Cleanup(c.Stop)
	l := c.Concurrency("api")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, ok := l.Acquire(PriorityPremium, 0)
			if ok {
				tk.Release(time.Now(), time.Millisecond, OK)
			}
		}
	})
}
