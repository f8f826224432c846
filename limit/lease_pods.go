package limit

import (
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// PartitionHold is how long the pods that reach the store keep the share
// of a pod whose heartbeats stopped free for it, and so how long a pod cut
// off from the store alone may grant its share of a contested key (see
// fallbackRoom). Bounded, so that a pod that is gone for good does not
// hold its share forever; long enough for an outage of tens of seconds.
// The heartbeats must stay in the store that long (Options.RecentPods).
const PartitionHold = 30 * time.Second

// heldShares counts the store calls sent with a limit lowered by the shares
// held for pods whose heartbeats stopped within PartitionHold.
var heldShares = metrics.NewCounter(`sentinel_limit_held_share_calls_total`)

// aloneWhileHeld counts the decisions of keys that were not contested made
// on the local share, without a store call, while the others may hold this
// pod's share (Limiter.heldByOthers).
var aloneWhileHeld = metrics.NewCounter(`sentinel_limit_alone_while_held_total`)

// blindHolds counts the store calls of contested keys sent with the
// limit lowered by every other pod's share because this pod's heartbeats
// had failed long enough for the others' to have too, or for its count of
// the live pods to be stale (Limiter.blind).
var blindHolds = metrics.NewCounter(`sentinel_limit_blind_held_calls_total`)

// podCount remembers the most pods seen live within PartitionHold: a pod
// that stopped sending heartbeats may be cut off from the store and grant
// its share alone, so the others keep that share free (storeParams).
type podCount struct {
	most   atomic.Int64
	mostAt atomic.Int64 // unix nanos: when most pods were last seen live
}

// pods returns the live pods now and the most seen live within
// PartitionHold (at least the live ones). Racing updates are harmless:
// each stores a count some reader saw.
func (l *Limiter) pods(now int64) (live, seen int64) {
	live = int64(max(1, l.livePods()))
	if l.heartbeatAt != nil && l.heartbeatAt().IsZero() {
		// No heartbeat of this pod has reached the store yet: the count
		// is limits.expected_pods, assumed, not pods seen; a pod assumed
		// and never seen is not one to hold a share for.
		return live, live
	}
	// The store keeps the heartbeats of the last PartitionHold: a pod
	// started since counts the ones that stopped as the others do.
	recent := int64(l.recentPods())
	most := l.podCount.most.Load()
	if live >= most || now-l.podCount.mostAt.Load() > int64(PartitionHold) {
		l.podCount.most.Store(live)
		l.podCount.mostAt.Store(now)
		return live, max(live, recent)
	}
	return live, max(most, recent)
}

// podsSeen is the pods a share divides the limit by: the most seen live
// within PartitionHold, so that the shares of the pods that reach the
// store and of one cut off from it add up to the limit at most.
func (l *Limiter) podsSeen() int64 {
	_, seen := l.pods(l.now().UnixNano())
	return seen
}

// storeParams are s's params as sent to the store: while fewer pods are
// live than were within PartitionHold, the limit is lowered by the shares
// of the missing ones, which may be deciding alone, cut off from the store
// (a token bucket's capacity and rate likewise). For a contested key (the
// store refused it within a window, or had when this pod's calls began to
// fail) the suspect pods count as missing too: back from an outage of its
// own, this pod still counts them live, but their heartbeats stopped long
// enough ago that, cut off, they may be granting their share alone (a
// tenant offered 3 times its limit got 107-111 in a second for 100 after
// a pause with one pod cut off). A key whose clients ask less than the
// limit needs no hold: the pods that reach the store take only what they
// ask, and holding the share of the pods that merely have not published
// since refused its clients at the resume.
// In every case the store's limit leaves out the permits it keeps for the
// pods' first uses (Limiter.reserved).
func (l *Limiter) storeParams(s *spec, now int64, contested bool) store.Params {
	p := s.params
	live, seen := l.pods(now)
	if r := l.reserved(s, seen); r > 0 {
		p.Limit = max(p.Limit-r, 0) // the pods' first uses (Limiter.firstUse)
	}
	if contested {
		live = max(live-int64(l.suspectPods()), 1)
		if live > 1 && l.blind(s, now) {
			blindHolds.Inc()
			live = 1
		}
	}
	if seen <= live || !l.shared || l.policy != FailLocal {
		return p
	}
	heldShares.Inc()
	missing := seen - live
	if p.Algorithm == store.TokenBucket {
		if p.Capacity > 0 {
			p.Capacity = max(p.Capacity-missing*max(p.Capacity/seen, 1), 1)
		}
		p.RefillRate = p.RefillRate * float64(live) / float64(seen)
		return p
	}
	if p.Limit > 0 {
		p.Limit = max(p.Limit-missing*max(p.Limit/seen, 1), 0)
	}
	return p
}

// heldShare is how much of its share (0 or 1) a pod whose calls for b's
// contested key fail may grant beyond what the store's last answer left it:
// none before the other pods can have noticed that its heartbeats stopped
// (peerNotice after its last heartbeat reached the store; unknown, after its
// calls for the key began to fail) and started to hold its share, none for
// a window and a lease after that (the window before they held it may hold
// their grants of the whole limit, and the leases they took then count
// until they expire), then all of it, and none once their hold may be over.
// A linear ramp over the window assumed their grants of it were spread
// evenly: a lump of them late in it left less room than the ramp gave (52
// in a second for 51, over 6 pods). A pod whose heartbeats still reach the
// store while its calls time out gets none: the others count it live and
// hold nothing for it. A pod whose breaker is still closed gets none: its
// failure is one slow call among answered ones. The caller holds b.mu.
func (l *Limiter) heldShare(s *spec, b *bucket, now int64, open bool) float64 {
	from, end, ok := l.heldSince(b, open)
	if !ok || now < from+int64(s.window+s.ttl) || now > end {
		return 0
	}
	return 1
}

// heldRefill is the time (in windows, not capped at one) since the others
// hold this pod's share of b's contested key (see heldShare): a token
// bucket's share refills at its rate from there, from empty (the share's
// own bucket, full while the store answered, would add its capacity to what
// the others' bucket held then). The caller holds b.mu.
func (l *Limiter) heldRefill(s *spec, b *bucket, now int64, open bool) float64 {
	from, end, ok := l.heldSince(b, open)
	if !ok || now <= from || now > end {
		return 0
	}
	return float64(now-from) / float64(max(s.window, time.Millisecond))
}

// heldSince is when the other pods hold this pod's share of b's key free
// for it, from the time they can have noticed its heartbeats stopped, and
// until when they may still hold it (unix nanos); ok is false while b's
// breaker is closed (a slow call among answered ones). The caller holds
// b.mu.
func (l *Limiter) heldSince(b *bucket, open bool) (from, end int64, ok bool) {
	if !open {
		return 0, 0, false
	}
	from = b.failingSince() + int64(l.peerNotice)
	end = b.answeredAt + int64(PartitionHold-l.peerNotice-time.Second)
	if beat := l.lastBeat(); beat > 0 {
		from = max(beat+int64(l.peerNotice), b.failingSince())
		end = beat + int64(PartitionHold-2*time.Second)
	}
	return from, end, true
}

// lastBeat is when this pod's last heartbeat reached the store (unix
// nanos; 0: unknown).
func (l *Limiter) lastBeat() int64 {
	if l.heartbeatAt == nil {
		return 0
	}
	if at := l.heartbeatAt(); !at.IsZero() {
		return at.UnixNano()
	}
	return 0
}

// blind tells that this pod's last heartbeat that may have reached the
// store is so old that another pod whose heartbeats failed with its own may
// decide alone by now as if the others held its share (heldByOthers: past
// HeartbeatTTL after its last heartbeat, which may be a heartbeat interval
// older than this pod's). When the store's node of the heartbeats fails
// while the nodes of the keys answer (a Redis Cluster master failing over),
// every pod's heartbeats fail together: none can read that the others
// stopped, so none holds their shares, and each decides alone the keys it
// saw no refusal of while the others take the whole limit of those keys
// from the store (a heavy user got 18 in a second for 12 over 6 pods).
// A blind pod therefore holds every other pod's share of a contested key
// itself (storeParams); of the keys whose clients ask less than the
// limit, no pod takes more than they ask. When only this pod cannot reach
// the heartbeats, the others hold its share as well: the store gets less
// of a contested key meanwhile, never more.
//
// The pod's count of the live pods is as old as its last heartbeat
// exchange too. A pod cut off since grants its share of s's key alone
// (heldShare) from a window and a lease after the others can have noticed
// it missing, which this pod's last exchange had not (it counted it live):
// so from a window and a lease after that exchange, this pod may count
// live a pod that grants alone, and take its share from the store as well
// (its own exchanges failing across that pod's notice time, briefly, and
// its calls coming back before its next exchange: the model's
// GATEWAY_STALE). For s's key the pod is blind from then, if sooner.
//
// A heartbeat is at most an interval old while the exchanges work, so a
// pod is never blind before two (with pressure_ttl under three intervals,
// or a window and a lease under two, a pod may then go blind after another
// decides alone, by the difference).
func (l *Limiter) blind(s *spec, now int64) bool {
	beat := l.lastBeat()
	if l.heartbeatTTL <= 0 || beat <= 0 {
		return false
	}
	after := min(l.heartbeatTTL-l.heartbeatEvery, int64(s.window+s.ttl))
	return now-beat > max(after, 2*l.heartbeatEvery)
}

// storeEmptied counts the answers that showed a store that lost a key's
// counts while this pod still had permits counting in them.
var storeEmptied = metrics.NewCounter(`sentinel_limit_store_emptied_total`)

// lostReported counts the permits pods reported again to a store that
// lost them (see Limiter.reportLost).
var lostReported = metrics.NewCounter(`sentinel_limit_store_emptied_reported_permits_total`)

// checkSeq compares the key's call number in a store answer res (a call
// sent at sent, answered at now) with the highest one b saw: a store numbers
// a key's calls one more each time, and starts again only with a key made
// anew, once no permit of it counts. A call sent after that answer came and
// numbered no higher, or answered by a key made anew after it (MadeAgo),
// while a permit counted by then may still count (the
// store granted this pod permits that do, or answered it within most of a
// window: the key then lives a window at least), talks to a store that lost
// writes (emptied, or a replica promoted before it had them): this pod's or
// other pods'. The pod then treats the key as recovering from a failure
// (see recovering): for a window its grants are trimmed to its local share,
// which counted every permit the store granted it before the loss. Every
// pod that served the key within the window notices at its first call, so
// the pods together stay within the limit: a pod that had not noticed
// from its own writes alone took the budget the store forgot that the
// others had used. It reports whether the answer showed the loss (then the
// caller reports again what the store lost of this pod's grants:
// reportLost). The caller holds b.mu.
func (l *Limiter) checkSeq(s *spec, b *bucket, res store.LeaseResult, sent, now int64) (emptied bool) {
	if res.Seq == 0 {
		return false
	}
	w := int64(s.recoveryWindow())
	switch {
	case sent > b.seqAt:
		// The key made anew after this pod's last answer came tells the
		// same when the others' calls since numbered it past the pod's
		// (the script ran after sent, and MadeAgo is in whole
		// milliseconds of the store's clock: a key made before
		// sent-MadeAgo-2ms is not known to be made later).
		made := res.MadeAgo >= 0 && sent-int64(res.MadeAgo+2*time.Millisecond) > b.seqAt
		if b.seq > 0 && (res.Seq <= b.seq || made) && (now < b.ownUntil || now-b.seqAt < w*9/10) {
			storeEmptied.Inc()
			a := b.aloneState()
			a.failedAt, a.emptiedAt = now, now
			emptied = true
		}
		b.seq, b.seqAt = res.Seq, now
	case res.Seq > b.seq: // sent before the last answer came: no order to check
		b.seq, b.seqAt = res.Seq, now
	}
	if res.Granted > 0 && w > 0 {
		// A margin of a tenth of the window for the store's sub-windows
		// and clock: a key made anew later than that is no loss.
		b.ownUntil = max(b.ownUntil, sent+w*9/10)
	}
	return emptied
}

// reportLost puts what the store lost of this pod's grants for b's key
// into b's unleased log, for the key's next call to report at their times
// (see checkSeq). An answer res, which came at now to a call that reported
// ret, from a key the store made anew after the pod's last answer for it
// (at prevAt) holds none of what the store granted the pod before: every
// permit the local share counts then (it counts them as the store did, and
// this answer's grant not yet) was lost, but those that ret reported, which
// the new key counted. Reported again by every pod that served the key,
// they hold the budget the pods used before the loss from the pods that
// cannot know of it: one restarted since, or one that had no grant of the
// key before. A replica promoted before it had the last writes keeps the
// key's time: what it lost of the pod's grants is not known, and nothing
// is reported again. The caller holds b.mu.
func (l *Limiter) reportLost(s *spec, b *bucket, res store.LeaseResult, ret *report, prevAt, now int64) {
	alg, w := s.params.Algorithm, s.params.Window
	if !l.shared || l.policy != FailLocal || (alg != store.SlidingWindow && alg != store.SlidingLog) ||
		res.MadeAgo < 0 || now-int64(res.MadeAgo) <= prevAt {
		return
	}
	var lost []store.UnleasedPart // N permits counted from Ago: here a time (ms)
	l.shareOf(s, b, now).Counted(s.key(), alg, w, func(at, n int64) {
		lost = append(lost, store.UnleasedPart{N: n, Ago: time.Duration(at)})
	})
	// Not twice: what the call reported, and what the log holds already
	// (let through alone, put back for the next call), the newest first.
	twice := ret.unleasedTotal() + b.unleasedTotal()
	width := unleasedWidth(&s.params)
	for i := len(lost) - 1; i >= 0; i-- {
		p := lost[i]
		d := min(twice, p.N)
		twice -= d
		if n := p.N - d; n > 0 {
			// The share counts a permit until a window after at; dated
			// a millisecond before it, the store counts it from the same
			// sub-window on, or the next: never for less long.
			at := (int64(p.Ago) - 1) * int64(time.Millisecond)
			b.addUnleased(n, at, width, at+int64(w))
			lostReported.Add(int(n))
		}
	}
}
