package adaptive

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"
)

// clusterView shares this pod's pressure with the other pods through Redis.
//
// The hash <prefix>:pressure:global holds podID → "score:unix ms". Each
// exchange publishes this pod's score, re-arms the key's expiry
// (pressure_ttl) and reads every pod's entry; entries older than
// pressure_ttl are ignored and removed, and the key expires when every pod
// is gone. The same entries are the heartbeats that count the live pods.
type clusterView struct {
	redis    rueidis.Client
	key, pod string
	interval time.Duration // between two exchanges; also one exchange's deadline
	ttl      time.Duration // how long a published score counts
	now      func() time.Time
	logf     func(format string, args ...any)
	errors   *metrics.Counter // sentinel_adaptive_cluster_errors_total
	lost     *metrics.Counter // sentinel_adaptive_heartbeats_lost_total

	// pods is the number of pods with a fresh score, this one included, as
	// last seen (Options.AssumedPods, at least 1, before the first exchange). A failed exchange leaves it
	// alone: the limits' local fallback divides each limit by it while the
	// store fails, and a pod that cannot reach Redis has no evidence that the
	// others are gone (they most likely cannot reach it either).
	pods   atomic.Int64
	onBack func() // see Options.OnBack
	// keep is how long a stopped pod's heartbeat stays (Options.KeepBeats,
	// at least ttl), and recent the number of pods with a heartbeat within
	// it at the last exchange that worked (see RecentPods).
	keep   time.Duration
	recent atomic.Int64
	// suspect is the number of pods counted live only because the view
	// came back within pressure_ttl, whose last heartbeat is older than
	// the notice time (see SuspectPods).
	suspect atomic.Int64
	// beat is when this pod's last heartbeat may have reached Redis (unix
	// nanos, the time written in it; 0: none yet): the others count it live
	// until that plus pressure_ttl. A heartbeat whose answer did not come in
	// time may have reached Redis all the same.
	beat atomic.Int64

	mu      sync.Mutex // guards average, ok and backAt
	average float64    // the live pods' mean score (this pod's own when it is alone)
	ok      bool       // the last exchange worked
	backAt  time.Time  // when an exchange worked again after failing
}

func newClusterView(cfg *Config, opts *Options, set *metrics.Set) *clusterView {
	key := "pressure:global"
	if opts.KeyPrefix != "" {
		key = opts.KeyPrefix + ":" + key
	}
	v := &clusterView{
		redis: opts.Redis, key: key, pod: opts.PodID,
		interval: cfg.ClusterInterval, ttl: cfg.PressureTTL, now: opts.Now, logf: opts.Logf, onBack: opts.OnBack,
		keep:   max(cfg.PressureTTL, opts.KeepBeats),
		errors: set.NewCounter(`sentinel_adaptive_cluster_errors_total`),
		lost:   set.NewCounter(`sentinel_adaptive_heartbeats_lost_total`),
		// A view still waiting for its Redis has no cluster to act on.
		ok: opts.Redis != nil,
	}
	v.pods.Store(int64(max(1, opts.AssumedPods)))
	return v
}

// run exchanges at once and then every pace until ctx ends; own reads
// this pod's current score.
func (v *clusterView) run(ctx context.Context, own func() float64) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v.exchange(ctx, own())
		t.Reset(v.pace())
	}
}

// pace is the time to the next exchange: the interval, or a fifth of it
// while the limits hold the share of a pod (one seen within keep is not
// live, or one is suspect): they hold it until its heartbeat is read
// again, and a pod that comes back reports what it let through alone
// before it publishes (reportFirst), so the store counts those permits
// twice until the others read its heartbeat, and could refuse clients
// under their limit for up to an interval. The faster pace lasts at most
// keep after a pod stopped (3 small commands each time).
func (v *clusterView) pace() time.Duration {
	if v.up() && (v.recent.Load() > v.pods.Load() || v.suspect.Load() > 0) {
		return v.fast()
	}
	return v.interval
}

// fast is a fifth of the interval: the pace while a share is held, and
// the time a pod coming back leaves its limits to report before it
// publishes its heartbeat.
func (v *clusterView) fast() time.Duration { return max(v.interval/5, time.Millisecond) }

// reportFirst, when the last exchange failed, checks that Redis answers
// before this pod publishes its heartbeat again. Back from an outage or a
// cut, it first has its limits report what they let through alone
// (Options.OnBack ends their breakers' cooldown: each key's next call
// reports), for a fifth of the interval, and publishes only then: the
// others stop holding its share as soon as they read its heartbeat, and a
// report that came after that let them take the share again on top of
// what the pod had let through. It reports whether to go on with the
// exchange.
func (v *clusterView) reportFirst(ctx context.Context) bool {
	if v.up() || v.onBack == nil {
		return true
	}
	r := v.redis
	probe, cancel := context.WithTimeout(ctx, v.interval)
	err := r.Do(probe, r.B().Exists().Key(v.key).Build()).Error()
	cancel()
	if err != nil {
		v.failed(err)
		return false
	}
	v.onBack()
	t := time.NewTimer(v.fast())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// exchange publishes own and reads the cluster's scores.
func (v *clusterView) exchange(ctx context.Context, own float64) {
	if !v.reportFirst(ctx) {
		return
	}
	now := v.now()
	prev := v.beat.Load()
	r := v.redis
	ctx, cancel := context.WithTimeout(ctx, v.interval)
	defer cancel()
	res := r.DoMulti(ctx,
		r.B().Hset().Key(v.key).FieldValue().FieldValue(v.pod, formatEntry(own, now)).Build(),
		r.B().Pexpire().Key(v.key).Milliseconds(v.keep.Milliseconds()).Build(),
		r.B().Hgetall().Key(v.key).Build())
	if err := res[0].Error(); err == nil || mayHaveLanded(err) {
		// Stored once the count below is (or the exchange failed): a
		// reader that sees the heartbeat sees a count of pods seen, not
		// the one assumed before the first exchange.
		defer v.beat.Store(now.UnixNano())
	}
	all, err := res[2].AsStrMap()
	for _, x := range res[:2] {
		err = errors.Join(err, x.Error())
	}
	if err != nil {
		v.failed(err)
		return
	}
	// HSET answers 1 when the field was not there: this pod's last
	// heartbeat, which may have landed within keep, is gone.
	added, _ := res[0].AsInt64()
	lost := added > 0 && prev > 0 && now.UnixNano()-prev < int64(v.keep)
	sum, n, recent, unnoticed, stale := v.tally(all, now)
	v.recent.Store(int64(max(recent, 1)))
	if len(stale) > 0 {
		r.Do(ctx, r.B().Hdel().Key(v.key).Field(stale...).Build())
	}
	if n == 0 {
		sum, n = own, 1
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case !v.ok:
		v.logf("adaptive: cluster view back")
		v.backAt = now
	case lost:
		// Redis lost the heartbeats (emptied, or a replica promoted before
		// it had them) while every exchange worked: the others' are gone
		// too, with no evidence that they stopped. Counted as a view that
		// comes back: without it, every pod held the others' shares (a
		// tenant at 63% of its limit was refused after a FLUSHALL).
		v.logf("adaptive: this pod's heartbeat was missing from Redis (emptied or failed over): the pods seen before stay counted for a pressure_ttl")
		v.lost.Inc()
		v.backAt = now
	}
	v.ok, v.average = true, sum/float64(n)
	v.count(now, n, recent, unnoticed)
}

// count stores the live and suspect pods of an exchange that worked at
// now, which saw n fresh heartbeats, recent within keep and unnoticed
// within the notice time. The caller holds v.mu.
func (v *clusterView) count(now time.Time, n, recent, unnoticed int) {
	suspect := 0
	if now.Sub(v.backAt) < v.ttl {
		// Back from a failure (Redis paused or unreachable), the other pods
		// have not all published since: their old entries are no evidence
		// that they are gone. The count may fall one pressure_ttl later.
		// Those whose last heartbeat is older than the notice time
		// (pressure_ttl + 2 × cluster_interval) are suspect meanwhile:
		// cut off, such a pod may grant its share alone by now (see
		// SuspectPods). A heartbeat missing altogether (Redis restarted
		// empty) says nothing of its age.
		prev := int(v.pods.Load())
		suspect = max(prev-max(n, unnoticed+max(prev-recent, 0)), 0)
		n = max(n, prev)
	}
	v.suspect.Store(int64(suspect))
	v.pods.Store(int64(n))
}

// tally reads the heartbeats all at now: the sum of the fresh ones' scores
// and their number, the number within keep, the number within the notice
// time, and the pods whose heartbeat is older than keep (or unreadable), to
// delete.
func (v *clusterView) tally(all map[string]string, now time.Time) (sum float64, n, recent, unnoticed int, stale []string) {
	for pod, e := range all {
		score, at, ok := parseEntry(e)
		if !ok || now.Sub(at) > v.keep {
			stale = append(stale, pod)
			continue
		}
		recent++
		if now.Sub(at) <= v.ttl+2*v.interval {
			unnoticed++
		}
		if now.Sub(at) > v.ttl {
			continue
		}
		sum += score
		n++
	}
	return sum, n, recent, unnoticed, stale
}

// failed records an exchange that did not work: until the next one works,
// the pod acts on its own pressure. The count of live pods stays as last
// seen: it changes only on heartbeats read from Redis.
func (v *clusterView) failed(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ok {
		v.logf("adaptive: cluster view unavailable, acting on this pod's pressure: %v", err)
	}
	v.ok = false
	v.errors.Inc()
}

// The readers below take a nil view for a pod without Redis: alone.

// read returns the cluster's average pressure, and false when there is none
// (no view, or the last exchange failed).
func (v *clusterView) read() (float64, bool) {
	if v == nil {
		return 0, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.average, v.ok
}

// up tells whether the pod sees the cluster.
func (v *clusterView) up() bool {
	_, ok := v.read()
	return ok
}

// livePods is the number of pods with a fresh score at the last exchange
// that worked (1 alone; Options.AssumedPods before any worked).
func (v *clusterView) livePods() int {
	if v == nil {
		return 1
	}
	return int(v.pods.Load())
}

// suspectPods: see Controller.SuspectPods.
func (v *clusterView) suspectPods() int {
	if v == nil {
		return 0
	}
	return int(v.suspect.Load())
}

// recentPods is the number of pods with a heartbeat within keep at
// the last exchange that worked (as livePods before any worked).
func (v *clusterView) recentPods() int {
	if v == nil {
		return 1
	}
	if n := v.recent.Load(); n > 0 {
		return int(n)
	}
	return v.livePods()
}

// mayHaveLanded tells that a command that failed with err may have run in
// Redis all the same: its answer did not come in time, the command had
// been sent.
func mayHaveLanded(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// leave removes this pod from the view.
func (v *clusterView) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v.redis.Do(ctx, v.redis.B().Hdel().Key(v.key).Field(v.pod).Build())
}

func formatEntry(score float64, at time.Time) string {
	return strconv.FormatFloat(score, 'f', 4, 64) + ":" + strconv.FormatInt(at.UnixMilli(), 10)
}

// parseEntry reads "score:unix ms".
func parseEntry(e string) (float64, time.Time, bool) {
	s, ms, ok := strings.Cut(e, ":")
	if !ok {
		return 0, time.Time{}, false
	}
	score, err1 := strconv.ParseFloat(s, 64)
	at, err2 := strconv.ParseInt(ms, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	return clamp(score), time.UnixMilli(at), true
}
