package adaptive

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

func newClusterController(t *testing.T, addr, pod string) *Controller {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	c, err := New(provisioned(Config{}), Options{Redis: client, PodID: pod, KeyPrefix: "test", Logf: t.Logf})
	require.NoError(t, err)
	return c
}

func TestClusterViewAndLivePods(t *testing.T) {
	srv := redistest.Start(t)
	a := newClusterController(t, srv.Addr, "a")
	b := newClusterController(t, srv.Addr, "b")
	ctx := context.Background()
	exchange := func(c *Controller) { c.view.exchange(ctx, c.local) }
	a.local, b.local = 0.8, 0.2
	exchange(a)
	exchange(b)
	exchange(a)
	assert.Equal(t, 2, a.LivePods())
	assert.Equal(t, 2, b.LivePods())
	assert.InDelta(t, 0.5, a.clusterPressure(), 1e-3)
	assert.InDelta(t, 0.5, b.clusterPressure(), 1e-3)

	b.Stop() // leaves the view
	exchange(a)
	assert.Equal(t, 1, a.LivePods())
	assert.InDelta(t, 0.8, a.clusterPressure(), 1e-3)

	c := newClusterController(t, srv.Addr, "c")
	exchange(c)
	exchange(a)
	require.Equal(t, 2, a.LivePods())

	srv.Stop()
	a.local = 0.3
	for range 3 {
		exchange(a)
	}
	assert.Equal(t, 2, a.LivePods(), "without Redis: the pods last seen, not this pod alone")
	assert.InDelta(t, 0.3, a.clusterPressure(), 1e-3, "without Redis: the pod's own score")
	a.Stop()
}

// TestLivePodsKeptWhenTheViewComesBack: after Redis could not be reached,
// the first exchanges that work again see only the pods that published
// since; the count stays as last seen for one pressure_ttl, then follows the
// heartbeats (it is what the limits' local shares divide by).
func TestLivePodsKeptWhenTheViewComesBack(t *testing.T) {
	srv := redistest.Start(t)
	a := newClusterController(t, srv.Addr, "a")
	b := newClusterController(t, srv.Addr, "b")
	var backs atomic.Int32
	a.view.onBack = func() { backs.Add(1) }
	ctx := context.Background()
	var skew time.Duration
	a.view.now = func() time.Time { return time.Now().Add(skew) }
	exchange := func(c *Controller) { c.view.exchange(ctx, c.local) }
	exchange(a)
	exchange(b)
	exchange(a)
	require.Equal(t, 2, a.LivePods())
	require.Zero(t, backs.Load())

	srv.Stop()
	exchange(a)
	require.False(t, a.view.up())
	srv.Restart() // empty: b's heartbeat is gone, as a stale one would be
	require.Eventually(t, func() bool { exchange(a); return a.view.up() }, 5*time.Second, 50*time.Millisecond)
	assert.Equal(t, 2, a.LivePods(), "back from a failure: b had no chance to publish yet")
	// At least once: Redis answering the probe calls it, and an exchange
	// that the restarted server's dropped connection fails after it calls
	// it again at the next probe (harmless: it ends the breakers' cooldown).
	assert.Eventually(t, func() bool { return backs.Load() >= 1 }, 5*time.Second, time.Millisecond, "OnBack once the view is back")

	// The restarted server may still drop a connection of the client's: each
	// time the view comes back, it holds the count for one pressure_ttl again,
	// so the clock moves a pressure_ttl on per try. A count that never falls
	// fails here.
	require.Eventually(t, func() bool {
		skew += a.view.ttl + time.Second
		exchange(a)
		return a.view.up() && a.LivePods() == 1
	}, 5*time.Second, 50*time.Millisecond, "a pressure_ttl after the view is back, b's missing heartbeat is evidence")
}

// TestSuspectPodWhenTheViewComesBack: back from a failure longer than the
// notice time (pressure_ttl + 2 × cluster_interval), a pod whose heartbeat
// is that old is still counted live while the others publish again, but as
// suspect: cut off, it may be granting its share alone by then, and the
// limits hold that share for a contested key. It is no longer suspect once
// it publishes.
func TestSuspectPodWhenTheViewComesBack(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	var skew time.Duration
	pod := func(id string, now func() time.Time) *Controller {
		c, err := New(provisioned(Config{}), Options{Redis: client, PodID: id, KeyPrefix: "test", Logf: t.Logf, KeepBeats: time.Minute, Now: now})
		require.NoError(t, err)
		return c
	}
	a := pod("a", func() time.Time { return time.Now().Add(skew) })
	b := pod("b", time.Now)
	ctx := context.Background()
	exchange := func(c *Controller) { c.view.exchange(ctx, c.local) }
	exchange(a)
	exchange(b)
	exchange(a)
	require.Equal(t, 2, a.LivePods())
	require.Zero(t, a.SuspectPods())

	srv.Pause()
	exchange(a) // times out: a cannot read the heartbeats
	srv.Resume()
	require.False(t, a.view.up())
	skew += a.view.ttl + 2*a.view.interval + time.Second
	exchange(a)
	require.True(t, a.view.up())
	assert.Equal(t, 2, a.LivePods(), "b had no chance to publish yet")
	assert.Equal(t, 1, a.SuspectPods(), "b's heartbeat is older than the notice time")

	skew = 0
	exchange(b)
	exchange(a)
	assert.Equal(t, 2, a.LivePods())
	assert.Zero(t, a.SuspectPods(), "b published again")
}

// TestReportsBeforeTheHeartbeat: back from a failure, the view calls
// OnBack (the limits report what they let through alone) before it
// publishes its heartbeat again: the others stop holding the pod's share
// when they read that heartbeat, and must count its report by then.
func TestReportsBeforeTheHeartbeat(t *testing.T) {
	srv := redistest.Start(t)
	a := newClusterController(t, srv.Addr, "a")
	ctx := context.Background()
	var skew time.Duration
	a.view.now = func() time.Time { return time.Now().Add(skew) }
	beat := func() time.Time {
		e, err := a.view.redis.Do(ctx, a.view.redis.B().Hget().Key(a.view.key).Field("a").Build()).ToString()
		require.NoError(t, err)
		_, at, ok := parseEntry(e)
		require.True(t, ok)
		return at
	}
	var atBack []time.Time
	a.view.onBack = func() { atBack = append(atBack, beat()) }
	a.view.exchange(ctx, a.local)
	before := beat()

	srv.Pause()
	a.view.exchange(ctx, a.local)
	srv.Resume()
	require.False(t, a.view.up())
	require.Empty(t, atBack)
	skew = time.Minute
	a.view.exchange(ctx, a.local)
	require.True(t, a.view.up())
	require.Len(t, atBack, 1, "OnBack once")
	// The exchange that timed out may have landed with the resume: its
	// heartbeat is unskewed; the one published after OnBack is a minute on.
	assert.True(t, atBack[0].Before(before.Add(skew/2)), "the heartbeat was not published again before OnBack")
	assert.True(t, beat().After(before.Add(skew/2)), "published after it")
}

// TestHeartbeatThatTimedOutMayHaveLanded: a heartbeat whose answer did not
// come in time may have reached Redis, and the others count the pod live
// from it: the pod counts it too (HeartbeatAt), so that it does not take
// its share back, cut off, while the others still count it live. A refused
// connection sent nothing.
func TestHeartbeatThatTimedOutMayHaveLanded(t *testing.T) {
	assert.True(t, mayHaveLanded(context.DeadlineExceeded))
	assert.True(t, mayHaveLanded(fmt.Errorf("exchange: %w", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded})))
	assert.False(t, mayHaveLanded(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}))
	assert.False(t, mayHaveLanded(errors.New("ERR wrong number of arguments")))
}

// TestRecentPodsKeepStoppedHeartbeats: a pod whose heartbeats stopped
// leaves the live count after pressure_ttl but stays among the recent pods
// for Options.KeepBeats, for every pod that reads Redis, one started after
// it stopped included; after that it is gone from both.
func TestRecentPodsKeepStoppedHeartbeats(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	var skew time.Duration
	now := func() time.Time { return time.Now().Add(skew) }
	pod := func(id string) *Controller {
		c, err := New(provisioned(Config{}), Options{Redis: client, PodID: id, KeyPrefix: "test", Logf: t.Logf, KeepBeats: time.Minute, Now: now})
		require.NoError(t, err)
		return c
	}
	ctx := context.Background()
	exchange := func(c *Controller) { c.view.exchange(ctx, c.local) }
	a, b := pod("a"), pod("b")
	exchange(a)
	exchange(b)
	exchange(a)
	require.Equal(t, 2, a.LivePods())
	require.Equal(t, 2, a.RecentPods())

	skew += a.view.ttl + time.Second // b stops
	exchange(a)
	c := pod("c") // started after b stopped
	exchange(c)
	assert.Equal(t, 1, a.LivePods())
	assert.Equal(t, 2, a.RecentPods(), "b's last heartbeat is kept")
	assert.Equal(t, 3, c.RecentPods(), "a pod started since counts b too")

	skew += time.Minute
	exchange(a)
	assert.Equal(t, 1, a.RecentPods(), "after KeepBeats b is gone")
}

// TestLivePodsKeptWhenRedisLosesTheHeartbeats: Redis emptied (FLUSHALL,
// or a replica promoted before it had them) while every exchange works:
// the first exchange after it sees this pod alone, and its own last
// heartbeat missing. The pods seen before stay counted for a pressure_ttl
// (the limits would otherwise hold their shares and refuse clients under
// their limit), then the count follows the heartbeats.
func TestLivePodsKeptWhenRedisLosesTheHeartbeats(t *testing.T) {
	srv := redistest.Start(t)
	a := newClusterController(t, srv.Addr, "a")
	b := newClusterController(t, srv.Addr, "b")
	c := newClusterController(t, srv.Addr, "c")
	ctx := context.Background()
	var skew time.Duration
	for _, p := range []*Controller{a, b, c} {
		p.view.now = func() time.Time { return time.Now().Add(skew) }
	}
	exchange := func(c *Controller) { c.view.exchange(ctx, c.local) }
	for _, p := range []*Controller{a, b, c, a} {
		exchange(p)
	}
	require.Equal(t, 3, a.LivePods())

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	require.NoError(t, client.Do(ctx, client.B().Flushall().Build()).Error())
	lost := a.view.lost.Get()
	exchange(a)
	assert.Equal(t, 3, a.LivePods(), "the others' heartbeats lost with Redis's data: no evidence that they stopped")
	assert.Zero(t, a.SuspectPods())
	assert.Equal(t, uint64(1), a.view.lost.Get()-lost)
	exchange(a)
	assert.Equal(t, uint64(1), a.view.lost.Get()-lost, "its heartbeat is there again")

	skew += a.view.ttl + time.Second
	exchange(b) // c does not publish again
	exchange(a)
	assert.Equal(t, 2, a.LivePods(), "a pressure_ttl on, the heartbeats count")
}
