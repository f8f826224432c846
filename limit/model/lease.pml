/*
 * lease.pml: a model of the lease protocol of package limit, for spin.
 *
 * Checked exhaustively by model_test.go (go test ./limit/model/, or
 * make model): every interleaving of requests, lease calls, answers,
 * timeouts, returns, local admissions and their reports, breakers, the
 * store stopping and coming back, the store losing its data, one pod cut
 * off from the store, and reloads, for one key shared by NPODS pods, a
 * limit of LIMIT permits per window of WIN ticks.
 *
 * Time is abstracted into ticks. A window is the current tick and the one
 * before it: every per-tick count is a ring of two slots, [0] the current
 * tick and [1] the previous one; the tick process shifts them, so the model
 * has no clock and its state space is finite without a bound on time or
 * on the number of faults. A lease lives until the end of the tick it was
 * granted in (lease lifetime < window); the store counts it at that tick,
 * so it stays counted for the window that follows (LeaseTTL + window).
 * A store call is two steps, sent (the store runs it, or fails at once) and
 * answered or given up on (store_timeout), and is over before the tick
 * ends (store_timeout < tick).
 *
 * The mapping to the Go names (limit/, limit/store/, lua/):
 *
 *   sc[p*2+a]    the store's count of pod p's permits in tick a (the Lua
 *                scripts' sub-window counters, kept per pod); reserved()
 *                is the share the store keeps for the other pods.
 *   held[p]      bucket.permits: leased, unused, usable until the tick ends.
 *   xp[p]        bucket.expired: a lease's unused permits, returned by the
 *                pod's next call (LeaseRequest.Return, endLease).
 *   unl[p*2+a]   bucket.unleased: what the local policy let through, by
 *                tick, reported with its times by the next call that
 *                reaches the store (LeaseRequest.Unleased, UnleasedBefore;
 *                reportLater puts them back when the call fails).
 *   led[p*2+a]   the local share (Limiter.fallback, useLocally,
 *                returnLocally): every permit the store granted the pod
 *                and every one it let through alone, less its returns.
 *   brk[p]       the store breaker (limit/breaker): open after a failed
 *                call, until the tick ends (breaker_cooldown); then the
 *                next call is the probe (with one failure to open it,
 *                half-open and closed do not differ here).
 *   fly[p]       a lease call in flight (bucket.fill); fg[p] its grant.
 *   slost        ticks since the store lost its data (FLUSHALL, a restart
 *                empty, a replica promoted behind): while it is < WIN the
 *                store's answers say so and the pods keep to their share
 *                (recovering, keepShare).
 *   net          every pod reaches the store; the store is stopped or
 *                paused for every pod; pod p is cut off from it (a
 *                partition of one pod).
 *   reload       a new limiter for the pod (gateway/reload.go) takes over
 *                the old one's state: share, unreported permits, breaker,
 *                first uses; its held lease is dropped (still counted:
 *                budget lost, never an overshoot).
 *   fu[p*2+a]    with -DFIRST_USES: the permits pod p let through in tick
 *                a on those the store keeps for it (Limiter.firstUse and
 *                lastUse, counted in firstUses), FU a pod a window; the
 *                store grants STORE_LIMIT, the limit less them.
 *
 * The shadow counts (not the protocol's: the checker's):
 *   use[a]       permits used in tick a, all pods: the ground truth of I1.
 *   tc[p*2+a]    what a store that lost nothing and dated every report at
 *                its time would count of pod p: the ground truth of I2.
 *
 * Invariants (asserted at every use and every refusal):
 *   I1  no window holds more uses than LIMIT: use[0]+use[1] <= LIMIT.
 *   I2  no request is refused while its pod's share has room and the
 *       window has room: refused at p implies own(p)+1 > SHARE or
 *       total+1 > LIMIT (counts from tc: uses, held leases, lost grants).
 *
 * The protocol as modelled:
 *   - the store grants pod p at most what keeps the unused share of every
 *     other live pod free: granted + own(p) + sum over q != p of
 *     max(own(q), SHARE) <= LIMIT (a pod cut off or deciding alone cannot
 *     go past its share, so the others can never take it);
 *   - a pod that cannot get an answer (breaker open, call failed or given
 *     up) lets a request through when its local share has room:
 *     led window + 1 <= LIMIT / NPODS;
 *   - reports carry the tick of every permit let through alone;
 *   - a store that lost its data says so for a window, and a pod trims its
 *     grants to its share meanwhile;
 *   - a reload keeps the share and the unreported permits;
 *   - with -DFIRST_USES (LIMIT 4), the store keeps FU permits a pod out
 *     of what it grants, the shares divide the rest, and a pod lets a
 *     request through on one of its own while it has one left in the
 *     window: at any time, without a store call (a key's first requests),
 *     and in place of any refusal (a busy key's, lastUse). I2 then counts
 *     the other pods' unused first uses as taken: a key asked for on one
 *     pod only may be refused that much under the limit.
 *
 * The gateway's hold (-DGATEWAY_HOLD; not with -DFIRST_USES): the store
 * keeps no pod's share in advance; the pods that reach it hold a missing
 * pod's share once they notice its heartbeats stopped. The rules, as the
 * gateway has them (limit/lease_pods.go, limit/fallback.go, limit/lease.go,
 * adaptive/cluster.go):
 *   - the store grants what the window's count (every pod's alike) leaves
 *     of the limit, lowered by the other pod's share when the caller counts
 *     that pod missing (storeParams: its heartbeats stopped NOTICE ticks
 *     ago, as the caller last read them), or when the caller is blind (its
 *     own heartbeats have failed for NOTICE ticks) and the key is
 *     contested on it;
 *   - a pod that gets no answer decides alone: first what its last answer
 *     for the key leaves it (fallbackRoom), then its local share. With no
 *     answer, the whole local share; for a key contested on it, nothing
 *     until a window after the other pod holds its share (heldShare); for
 *     a key not contested, its share of what the answer left and of the
 *     answer's permits as they leave the window;
 *   - a key answered and not contested is decided alone, without a store
 *     call, while the other pod may hold the pod's share (heldByOthers);
 *   - a pod back after a gap in its heartbeats has its breaker probe with
 *     the next call (StoreReachable); the other pod holds its share until
 *     it reads the pod's next heartbeat;
 *   - for a window after a failed call or an admission alone, a pod trims
 *     its grants to its share (recovering, keepShare; rf below).
 * Its variables:
 *   gone[p]      ticks since pod p's last heartbeat reached the store, up to
 *                NOTICE+1 (clusterView.beat, Limiter.lastBeat); aged by the
 *                tick while p's heartbeats fail or have not gone out since.
 *                At NOTICE the others may no longer count p live
 *                (PeerNotice: pressure_ttl and two cluster_intervals), p
 *                decides a key not contested alone (heldByOthers) and p is
 *                blind (Limiter.blind): the ticks do not tell these apart.
 *   hv[p]        p counts the other pod missing: its live count (livePods,
 *                recentPods, suspectPods) as it last read the heartbeats,
 *                at every tick it reaches them and at any step between.
 *   ans[p]       the store answered p for the key (bucket.answeredAt).
 *   fs[p]        bucket.alone.failingSince: 0 answered since p's last
 *                failed call, 1 failing since this tick, 2 since an earlier
 *                one.
 *   ctd[p]       the key is contested on p (Limiter.contested,
 *                contestedNow): the store refused it to p (or granted its
 *                last permit: cacheSpent) within a window before the
 *                failures began, or since; den[p] is the ticks since that
 *                refusal (bucket.rare.deniedAt), up to 2.
 *   lft[p], aage[p], fb[p]  fallbackRoom of a key not contested: p's last
 *                answer left a permit of p's share (remaining / pods >= 1),
 *                the ticks since that answer (freed: none of its permits
 *                left the window, some, all), and bucket.alone.fallbackUsed
 *                plus 1, within 0..2.
 *   flh[p], fr[p]  the call in flight was sent with the other's share held;
 *                the remaining budget the store answers it.
 *   net 4        the heartbeats fail for every pod while the key's calls
 *                work (the heartbeats' node fails over, the key's does not).
 * Left out: the hold's end (PartitionHold: here it lasts the whole
 * outage); that a pod back from an outage of its own counts the others
 * live for a pressure_ttl for a key not contested (here it holds their
 * shares as for a contested one); refusedAlone; a bucket swept once idle
 * (here an answer is never forgotten).
 * I2 is then the gateway's: the store's refusal is checked as the store
 * decides it (a grant in flight may be given back before it is read), with
 * the window less the share held full; and a pod refused alone because the
 * other pod may take its share meanwhile (fallbackRoom) is not I2's.
 * Where the gateway promises the limit is narrowed down by
 *   -DANSWERED_ONLY a pod with no answer for the key grants nothing alone
 *   -DCONTESTED     the key is contested on every pod all along: its clients
 *                   ask more than the limit, and the store refused them
 *                   before any failure
 *   -DREPORT_FIRST  a pod back reports what it let through alone before its
 *                   next heartbeat goes out (the key is called within the
 *                   fifth of cluster_interval StoreReachable leaves)
 *   -DNO_FLUSH      (below)
 * With the four, and NOTICE 1, both invariants hold. Each left out, or a
 * notice of 2 ticks, yields a counterexample (model_test.go keeps them).
 * Not the gateway's rule: with -DHOLD_STALE a pod whose own heartbeats
 * have failed since it last read the others' (gone > 0, not only past
 * NOTICE) holds the other's share of a contested key, as a blind pod does;
 * with it the four hold with -DNOTICE=2 too (6.5 million states).
 *
 * Known-wrong variants (each must yield a counterexample):
 *   -DWHOLE_SHARE   the fallback share is the whole limit, not LIMIT/NPODS
 *   -DREPORT_NOW    reports are dated when sent, not when the permits were
 *                   used; every tick re-dates what is still unreported
 *   -DNO_RESERVE    the store keeps no share for the other pods (a cut-off
 *                   pod's share is taken by the others)
 *   -DHELD_WHEN_CUT the store keeps a pod's share only once it is cut off
 *                   (noticed at once), not before
 *   -DNO_NOTICE     an emptied store is taken at face value
 *   -DNOTICE_OWN    only a pod whose own permits still count notices that
 *                   the store lost its data (the others take its budget)
 *   -DRELOAD_RESET  a reload starts with an empty share, a closed breaker
 *                   and no unreported permits
 *   -DFIRST_USES -DFU_UNRESERVED  the store grants the whole limit beside
 *                   the first uses
 *   -DFIRST_USES -DFU_FORGET  a reload forgets the pod's first uses
 *   -DGATEWAY_HOLD  the gateway's hold, as it is
 *   -DGATEWAY_HOLD -DANSWERED_ONLY -DUNANSWERED_I2  the other choice for a
 *                   pod with no answer for the key: it refuses, and the
 *                   refusal is held to I2 (which ANSWERED_ONLY exempts)
 * and of the gateway's hold with the four narrowing macros above:
 *   -DAT_NOTICE     a pod cut off takes its share of a contested key as
 *                   soon as the others may hold it, not a window later
 *   -DUNBLIND       a blind pod holds nothing itself
 *
 * Sizes: NPODS 2 (the tick and I2 read pods 0 and 1 by name), LIMIT 3 (a
 * share of 1, so that a pod may take more than its share while the other
 * is idle), MAXLEASE 2, faults without bound (-DNO_DOWN, -DNO_CUT,
 * -DNO_FLUSH, -DNO_RELOAD, and with -DGATEWAY_HOLD -DNO_BLIND, leave one
 * out); with -DGATEWAY_HOLD, NOTICE 1 (-DNOTICE=2: 2 ticks). With -DBFS
 * pan finds the shortest counterexample (of the gateway's hold, pan -DREACH
 * to a depth bound: see model_test.go).
 */

#ifndef NPODS
#define NPODS 2
#endif
#ifndef LIMIT
#ifdef FIRST_USES
#define LIMIT 4
#else
#define LIMIT 3
#endif
#endif
#define WIN 2
#ifdef FIRST_USES
#define FU 1
#ifdef FU_UNRESERVED
#define STORE_LIMIT LIMIT
#else
#define STORE_LIMIT (LIMIT - NPODS * FU)
#endif
#else
#define STORE_LIMIT LIMIT
#endif
#define SHARE (STORE_LIMIT / NPODS)
#ifdef WHOLE_SHARE
#define FALLBACK_SHARE LIMIT
#else
#define FALLBACK_SHARE SHARE
#endif
#ifndef MAXLEASE
#define MAXLEASE 2
#endif

#define W2(p) (p*2)
#define win(arr, p) (arr[W2(p)] + arr[W2(p)+1])
#define dec(x, n) x = ((x) > (n) -> (x) - (n) : 0)
#define capped(x) (((x) > LIMIT+1) -> LIMIT+1 : (x))

byte use[2];
byte tc[NPODS*2];
byte sc[NPODS*2];
byte held[NPODS];
byte xp[NPODS];
byte unl[NPODS*2];
byte led[NPODS*2];
bit brk[NPODS];       /* 0 closed, 1 open */
bit fly[NPODS];
byte fg[NPODS];
bit frec[NPODS];
#ifdef FIRST_USES
byte fu[NPODS*2];
#endif
#if defined(HELD_WHEN_CUT) || defined(NO_RESERVE) || defined(GATEWAY_HOLD)
/* Without the share kept in the store, the gateway's recovery rule
 * (Limiter.recovering): for a window after a pod decided alone, it trims
 * its grants to its share. */
byte rf[NPODS];
#define RECOVERING(p) (frec[p] || rf[p] > 0)
#define FAILED(p) rf[p] = WIN
#define COOL(i) if :: rf[i] > 0 -> rf[i]-- :: else fi
#else
#define RECOVERING(p) frec[p]
#define FAILED(p) skip
#define COOL(i) skip
#endif
byte slost = WIN;
/* The network: 0 every pod reaches the store, 1 the store is down for all
 * (stopped, paused), 2+p pod p is cut off from it. */
byte net;
#define NET_OK 0
#define NET_DOWN 1
#define unreachable(p) (net == NET_DOWN || net == 2 + p)

#ifdef GATEWAY_HOLD
/* With -DGATEWAY_HOLD, the hold as the gateway keeps it (see the header),
 * in place of the share the store keeps for every pod. */
#ifndef NOTICE
#define NOTICE 1
#endif
/* 4: the heartbeats fail for every pod while the key's calls work (their
 * node fails over, the key's does not). */
#define NET_BLIND 4
#define beats(p) (net != NET_DOWN && net != 2 + p && net != NET_BLIND)
byte gone[NPODS];     /* ticks since p's last heartbeat, up to NOTICE+1 */
bit hv[NPODS];        /* p holds the other pod's share (its live count) */
bit ans[NPODS];       /* the store answered p for the key */
byte fs[NPODS];       /* 0 answered since its last failure, 1 failing
                       * since this tick, 2 since an earlier one */
bit flh[NPODS];       /* the call in flight was sent with a share held */
#ifdef CONTESTED
#define contested(p) 1
#else
bit ctd[NPODS];       /* the key is contested on p */
byte den[NPODS] = 2;  /* ticks since the store refused p, up to 2 (none
                       * within a window) */
bit lft[NPODS];       /* p's last answer left a permit of p's share */
byte aage[NPODS];     /* ticks since p's last answer, up to 2 */
byte fb[NPODS] = 1;   /* p's permits let through alone since that answer,
                       * plus 1, kept within 0..2 */
byte fr[NPODS];       /* the remaining budget of the call in flight */
#define contested(p) ctd[p]
#endif
#ifdef REPORT_FIRST
#define BEAT_WAITS(p) && (gone[p] < NOTICE || win(unl, p) == 0)
#else
#define BEAT_WAITS(p)
#endif
/* The others hold p's share: they noticed its heartbeats stopped, or have
 * not yet read the one that ended the gap (Limiter.heldByOthers). */
#define heldByOthers(p) (gone[p] >= NOTICE || hv[1 - p])
/* p's share of a contested key comes back a window after the others hold
 * it, and after its calls began to fail (heldShare): the tick after both. */
#ifndef AT_NOTICE
#define heldShare(p) (gone[p] > NOTICE && fs[p] == 2)
#else
#define heldShare(p) (gone[p] >= NOTICE && fs[p] >= 1)
#endif
#endif

#if !defined(BFS) || !defined(GATEWAY_HOLD)
#define FORGET
#endif

/* Scratch, outside the state: every step that sets one reads it in the
 * same atomic step. */
#ifdef BFS
byte want, res, q, k, total, i; /* pan -DBFS (shortest trails) takes no hidden */
#ifdef GATEWAY_HOLD
byte hs, ok;
/* In the state, the scratch is cleared after every step that sets it,
 * else its last values multiply the states. */
#define FORGET ; want = 0; res = 0; q = 0; k = 0; total = 0; i = 0; hs = 0; ok = 0
#endif
#else
hidden byte want, res, q, k, total, i;
#ifdef GATEWAY_HOLD
hidden byte hs, ok;   /* hs: the share held in a refusal; ok: room */
#endif
#endif

#define CLOSED 0
#define OPEN 1

/* I1: the window's uses. */
inline used(p) {
	use[0]++;
	assert(use[0] + use[1] <= LIMIT)
}

#ifdef FIRST_USES
/* A first use: p lets a request through on a permit the store keeps for
 * it. */
inline firstUse(p) {
	fu[W2(p)]++;
	used(p);
	tc[W2(p)] = capped(tc[W2(p)] + 1)
}
#endif

/* I2: a refusal at p needs p's share or the window to be full. With first
 * uses, p has used its own (else it takes one: lastUse), and the other
 * pod's unused ones count as taken. */
inline refused(p) {
	total = tc[0] + tc[1] + tc[2] + tc[3];
#if defined(GATEWAY_HOLD)
	/* The store's refusal with a share held: the window less that share
	 * is full (hs: the share held, or 0). */
	assert(win(tc, p) + 1 > SHARE || total + 1 + hs > LIMIT)
#elif !defined(FIRST_USES)
	assert(win(tc, p) + 1 > SHARE || total + 1 > LIMIT)
#else
	if
	:: win(fu, p) < FU ->
		printf("pod%d: admits on its first use, in place of a refusal\n", p);
		firstUse(p)
	:: else ->
		assert(win(tc, p) + 1 > SHARE + FU || total + 1 + FU - win(fu, (1 - p)) > LIMIT)
	fi
#endif
}

#ifndef GATEWAY_HOLD
/* fallbackDecision: the local share decides. */
inline fallback(p) {
	FAILED(p);
	if
	:: win(led, p) + 1 <= FALLBACK_SHARE ->
		printf("pod%d: admits alone (its share: %d of %d used)\n", p, win(led, p), FALLBACK_SHARE);
		used(p);
		led[W2(p)]++;
		unl[W2(p)]++;
		tc[W2(p)] = capped(tc[W2(p)] + 1)
	:: else ->
		printf("pod%d: refuses alone (its share: %d of %d used)\n", p, win(led, p), FALLBACK_SHARE);
		refused(p)
	fi
}
#else
/* fallbackRoom: may p let a request through alone, given the store's last
 * answer for the key (ok)? With no answer, yes (the pod knows nothing of
 * what the others took; with -DANSWERED_ONLY, no). A contested key: only
 * once the others hold p's share (heldShare). A key that was not
 * contested: its share of what the answer left (remaining / pods >= 1,
 * with nothing let through alone since), or of the permits the answer
 * counted as they leave the window: none in the answer's tick, all after
 * the next, and in the next any part (freed grows with the time between
 * the first's leaving and the last's, which the ticks do not tell: the
 * model lets either happen); all at once for an answer that showed the
 * store lost its data. fallbackUsed below 0 (a failed call gave back
 * unused leased permits) leaves room in any case. */
inline room(p) {
	if
#ifndef ANSWERED_ONLY
	:: !ans[p] -> ok = 1
#else
	:: !ans[p] -> ok = 0
#endif
	:: ans[p] && contested(p) -> ok = heldShare(p)
#ifndef CONTESTED
	:: ans[p] && !contested(p) && (aage[p] >= 2 || frec[p] || fb[p] == 0) -> ok = 1
	:: ans[p] && !contested(p) && aage[p] < 2 && !frec[p] && fb[p] == 1 && lft[p] -> ok = 1
	:: ans[p] && !contested(p) && aage[p] == 1 && !frec[p] && fb[p] == 1 && !lft[p] -> ok = 1
	:: ans[p] && !contested(p) && aage[p] == 1 && !frec[p] && fb[p] == 1 && !lft[p] -> ok = 0
	:: ans[p] && !contested(p) && aage[p] < 2 && !frec[p] && (fb[p] == 2 || aage[p] == 0 && !lft[p]) -> ok = 0
#endif
	fi
}

/* fallbackDecision: what the last answer leaves (fallbackRoom), then the
 * local share, decide. */
inline alone(p) {
	room(p);
	hs = 0;
	if
	:: ok && win(led, p) + 1 <= FALLBACK_SHARE ->
		printf("pod%d: admits alone (its share: %d of %d used)\n", p, win(led, p), FALLBACK_SHARE);
		FAILED(p); /* recovering counts the permits let through alone */
		used(p);
		led[W2(p)]++;
		unl[W2(p)]++;
		tc[W2(p)] = capped(tc[W2(p)] + 1)
#ifndef CONTESTED
		; if :: fb[p] < 2 -> fb[p]++ :: else fi
#endif
	:: ok && win(led, p) + 1 > FALLBACK_SHARE ->
		printf("pod%d: refuses alone (its share: %d of %d used)\n", p, win(led, p), FALLBACK_SHARE);
		refused(p)
	/* Not I2's: the other pod may be taking this share meanwhile. */
	:: !ok && !ans[p] ->
		printf("pod%d: refuses alone (no answer for the key)\n", p)
#ifdef UNANSWERED_I2
		/* The refusal that ANSWERED_ONLY makes, held to I2: the
		 * share and the window may both have room. */
		; refused(p)
#endif
	:: !ok && ans[p] && contested(p) ->
		printf("pod%d: refuses alone (contested, its share not held for it yet)\n", p)
	:: !ok && ans[p] && !contested(p) ->
		printf("pod%d: refuses alone (the last answer leaves it nothing yet)\n", p)
	fi
}

/* A failed call (bucket.failing): the first since an answer begins the
 * stretch of failures, and whether the store refused the key within a
 * window before it makes the key contested (Limiter.contested). */
inline fallback(p) {
	FAILED(p);
	if
	:: fs[p] == 0 ->
		fs[p] = 1
#ifndef CONTESTED
		; ctd[p] = (den[p] < 2)
#endif
	:: else
	fi;
	alone(p)
}
#endif

/* reserved: what the store keeps free for the pods other than p. */
inline reserved(p) {
	res = 0;
#if defined(GATEWAY_HOLD)
	/* The store counts every pod's permits alike: what it keeps from p is
	 * the other's count, and the other's share besides when p's call
	 * lowers the limit by it (storeParams): p counts the other missing,
	 * or p is blind and the key contested on it (with -DHOLD_STALE, from
	 * its first failed heartbeat; with -DUNBLIND, never). */
	q = 1 - p;
#if defined(HOLD_STALE)
	flh[p] = (hv[p] || contested(p) && gone[p] > 0);
#elif !defined(UNBLIND)
	flh[p] = (hv[p] || contested(p) && gone[p] >= NOTICE);
#else
	flh[p] = hv[p];
#endif
	res = win(sc, q) + SHARE * flh[p]
#elif !defined(NO_RESERVE)
	q = 0;
	do
	:: q < NPODS ->
		if
#ifndef HELD_WHEN_CUT
		:: q != p -> res = res + ((win(sc, q) > SHARE) -> win(sc, q) : SHARE)
#else
		:: q != p && net == 2 + q -> res = res + ((win(sc, q) > SHARE) -> win(sc, q) : SHARE)
		:: q != p && net != 2 + q -> res = res + win(sc, q)
#endif
		:: else
		fi;
		q++
	:: else -> break
	od
#else
	res = sc[0] + sc[1] + sc[2] + sc[3] - win(sc, p)
#endif
}

/* The store runs p's lease call (the scripts, atomically): the return of
 * the last lease's unused permits, the report of what p let through alone,
 * then a grant of up to want permits, all or nothing for the request's 1. */
inline storeRuns(p, want) {
	/* return */
	dec(sc[W2(p)+1], xp[p]);
	dec(tc[W2(p)+1], xp[p]);
	dec(led[W2(p)+1], xp[p]);
#if defined(GATEWAY_HOLD) && !defined(CONTESTED)
	dec(fb[p], xp[p]); /* leaseFailed's, should the pod give up on the call */
#endif
	xp[p] = 0;
	/* report, with their times */
#ifndef REPORT_NOW
	sc[W2(p)] = capped(sc[W2(p)] + unl[W2(p)]);
	sc[W2(p)+1] = capped(sc[W2(p)+1] + unl[W2(p)+1]);
#else
	sc[W2(p)] = capped(sc[W2(p)] + unl[W2(p)] + unl[W2(p)+1]);
#endif
	unl[W2(p)] = 0;
	unl[W2(p)+1] = 0;
	/* grant */
	reserved(p);
	if
	:: win(sc, p) + res + 1 <= STORE_LIMIT ->
		fg[p] = STORE_LIMIT - win(sc, p) - res;
		if
		:: fg[p] > want -> fg[p] = want
		:: else
		 fi
	:: else -> fg[p] = 0
	fi;
	sc[W2(p)] = sc[W2(p)] + fg[p];
	tc[W2(p)] = capped(tc[W2(p)] + fg[p]);
#ifndef GATEWAY_HOLD
	printf("pod%d: lease call runs, want %d, granted %d (store: pod %d, others reserved %d)\n", p, want, fg[p], win(sc, p) - fg[p], res);
#else
	printf("pod%d: lease call runs, want %d, granted %d (store: pod %d, other %d, share held %d)\n", p, want, fg[p], win(sc, p) - fg[p], res - SHARE * flh[p], SHARE * flh[p]);
	/* I2 of the store's refusal, as the store decides it (whether or not
	 * the pod reads it): the window, less the share held, is full. At the
	 * read, a grant the other pod gave up on may have been given back
	 * meanwhile. */
	if
	:: fg[p] == 0 -> hs = SHARE * flh[p]; refused(p)
	:: else
	fi;
#ifndef CONTESTED
	if
	:: win(sc, p) + res < STORE_LIMIT -> fr[p] = STORE_LIMIT - win(sc, p) - res
	:: else -> fr[p] = 0
	fi;
#endif
#endif
#if !defined(NO_NOTICE) && !defined(NOTICE_OWN)
	frec[p] = (slost < WIN);
#elif defined(NOTICE_OWN)
	frec[p] = (slost < WIN && win(led, p) > 0);
#else
	frec[p] = 0;
#endif
	fly[p] = 1
}

/* A call's unleased permits go back (reportLater) when it failed: nothing
 * to do here, they leave unl only when the store takes them. The return
 * rode on the call: the pod does not send it twice (callLease), and the
 * local share takes the permits back whatever happened. */
inline callFailed(p) {
	printf("pod%d: lease call fails\n", p);
	dec(led[W2(p)+1], xp[p]);
#if defined(GATEWAY_HOLD) && !defined(CONTESTED)
	dec(fb[p], xp[p]);
#endif
	xp[p] = 0;
	brk[p] = OPEN;
	fallback(p)
}

/* The pod reads the answer (refill): trimmed to its share while the store
 * recovers (keepShare), the request uses one, the rest is the lease. */
inline answered(p) {
	brk[p] = CLOSED;
#ifdef GATEWAY_HOLD
	/* The answer (refill): b.answeredAt, remaining, fallbackUsed. */
	ans[p] = 1;
	fs[p] = 0;
	hs = 0;
	ok = (fg[p] == 0); /* the store refused: I2 checked as it did */
#ifndef CONTESTED
	aage[p] = 0;
	fb[p] = 1;
	lft[p] = (fr[p] >= NPODS);
	/* A grant that leaves nothing is cached as a refusal (cacheSpent). */
	if
	:: fg[p] > 0 && fr[p] == 0 && !RECOVERING(p) -> den[p] = 0; ctd[p] = 1
	:: else
	fi;
	fr[p] = 0;
#endif
	flh[p] = 0;
#endif
	if
	:: RECOVERING(p) && fg[p] > 0 ->
		if
		:: win(led, p) + 1 > SHARE ->
			dec(sc[W2(p)], fg[p]);
			dec(tc[W2(p)], fg[p]);
			fg[p] = 0
		:: win(led, p) + 1 <= SHARE && win(led, p) + fg[p] > SHARE ->
			k = fg[p] - (SHARE - win(led, p));
			dec(sc[W2(p)], k);
			dec(tc[W2(p)], k);
			fg[p] = fg[p] - k
		:: else
		fi
	:: else
	fi;
	if
	:: fg[p] > 0 ->
		printf("pod%d: answer read, admits with %d granted\n", p, fg[p]);
		used(p);
		led[W2(p)] = led[W2(p)] + fg[p];
		held[p] = fg[p] - 1
	:: else ->
		printf("pod%d: answer read, refuses\n", p);
#if defined(GATEWAY_HOLD) && !defined(CONTESTED)
		/* cacheRefusal: refused after the failures began, the key is
		 * contested. */
		den[p] = 0;
		ctd[p] = 1;
#endif
#ifdef GATEWAY_HOLD
		if :: !ok -> refused(p) :: else fi
#else
		refused(p)
#endif
	fi;
	fg[p] = 0;
	fly[p] = 0
}

/* The pod gave up on the call (store_timeout): the request goes to the
 * local share; the late answer's grant is returned (returnGrant) or,
 * when that return is lost too, stays counted (budget lost, never an
 * overshoot). */
inline gaveUp(p) {
	brk[p] = OPEN;
	if
	:: !unreachable(p) ->
		printf("pod%d: gives up on the call; its %d granted return\n", p, fg[p]);
		dec(sc[W2(p)], fg[p]);
		dec(tc[W2(p)], fg[p])
	:: true ->
		printf("pod%d: gives up on the call; its %d granted stay counted\n", p, fg[p])
	fi;
	fg[p] = 0;
	fly[p] = 0;
#ifdef GATEWAY_HOLD
	flh[p] = 0;
#ifndef CONTESTED
	fr[p] = 0;
#endif
#endif
	fallback(p)
}

proctype pod(byte p) {
	do
#ifdef FIRST_USES
	/* A request of a key with no bucket here takes one of the permits the
	 * store keeps for the pod, while it has one left (firstUse). */
	:: atomic { win(fu, p) < FU ->
		printf("pod%d: admits on its first use\n", p);
		firstUse(p) }
#endif
	/* A request finds a leased permit (decideLocally). */
	:: atomic { !fly[p] && held[p] > 0 ->
		printf("pod%d: admits from its lease\n", p);
		held[p]--;
		used(p) }
	/* A request finds none: its pod asks the store, or decides alone. */
#ifdef GATEWAY_HOLD
	/* A key answered before and not contested is decided alone while the
	 * others may hold the pod's share: what the store granted it or
	 * learnt from it would count twice. */
	:: atomic { !fly[p] && held[p] == 0 && ans[p] && !contested(p) && heldByOthers(p) ->
		printf("pod%d: decides alone while the other may hold its share\n", p);
		alone(p) FORGET }
	:: atomic { !fly[p] && held[p] == 0 && !(ans[p] && !contested(p) && heldByOthers(p)) ->
#else
	:: atomic { !fly[p] && held[p] == 0 ->
#endif
		if
		:: brk[p] == OPEN -> fallback(p)
		:: brk[p] != OPEN && unreachable(p) -> callFailed(p)
		:: brk[p] != OPEN && !unreachable(p) ->
			if
			:: want = 1
			:: MAXLEASE > 1 -> want = MAXLEASE
			fi;
			storeRuns(p, want)
		fi FORGET }
	:: atomic { fly[p] -> answered(p) FORGET }
	:: atomic { fly[p] -> gaveUp(p) FORGET }
	/* A reload: a new limiter, with the old one's state carried over. */
#ifndef NO_RELOAD
	:: atomic { !fly[p] ->
		printf("pod%d: reloads\n", p);
		held[p] = 0;
#ifdef RELOAD_RESET
		brk[p] = CLOSED;
		led[W2(p)] = 0; led[W2(p)+1] = 0; xp[p] = 0;
		unl[W2(p)] = 0; unl[W2(p)+1] = 0;
#endif
#ifdef FU_FORGET
		fu[W2(p)] = 0; fu[W2(p)+1] = 0;
#endif
		skip }
#endif
	od
}

/* Time and the store's faults. */
active proctype world() {
	do
	/* A tick ends once no call is in flight: the windows slide, leases
	 * expire (their unused permits wait for the next call's return), open
	 * breakers cool down to half-open. */
	:: atomic { !fly[0] && !fly[1] ->
		printf("tick (uses in the window: %d + %d)\n", use[1], use[0]);
		use[1] = use[0]; use[0] = 0;
		i = 0;
		do
		:: i < NPODS ->
			tc[W2(i)+1] = tc[W2(i)]; tc[W2(i)] = 0;
			sc[W2(i)+1] = sc[W2(i)]; sc[W2(i)] = 0;
			led[W2(i)+1] = led[W2(i)]; led[W2(i)] = 0;
#ifndef REPORT_NOW
			unl[W2(i)+1] = unl[W2(i)];
#else
			unl[W2(i)+1] = capped(unl[W2(i)+1] + unl[W2(i)]);
#endif
			unl[W2(i)] = 0;
#ifdef FIRST_USES
			fu[W2(i)+1] = fu[W2(i)]; fu[W2(i)] = 0;
#endif
			xp[i] = held[i]; held[i] = 0;
			brk[i] = CLOSED;
			COOL(i);
#ifdef GATEWAY_HOLD
			/* A pod whose heartbeats fail, or have not reached the store
			 * since they did, has its last one a tick older. */
			if
			:: (!beats(i) || gone[i] > 0) && gone[i] <= NOTICE -> gone[i]++
			:: else
			fi;
			if :: fs[i] == 1 -> fs[i] = 2 :: else fi;
#ifndef CONTESTED
			if :: den[i] < 2 -> den[i]++ :: else fi;
			if :: aage[i] < 2 -> aage[i]++ :: else fi;
#endif
#endif
			i++
		:: else -> break
		od;
#ifdef GATEWAY_HOLD
		/* Every pod that reaches the heartbeats reads them within a tick;
		 * one that does not keeps the live count it last read. */
		if :: beats(0) -> hv[0] = (gone[1] >= NOTICE) :: else fi;
		if :: beats(1) -> hv[1] = (gone[0] >= NOTICE) :: else fi;
#endif
		if
		:: slost < WIN -> slost++
		:: else
		fi FORGET }
	/* The store comes back for every pod; it stops (or pauses) for every
	 * pod; one pod is cut off from it (a partition of one pod). */
	:: atomic { net != NET_OK -> net = NET_OK; printf("the store is back for every pod\n") }
#ifndef NO_DOWN
	:: atomic { net != NET_DOWN -> net = NET_DOWN; printf("the store is down for every pod\n") }
#endif
#ifndef NO_CUT
	:: atomic { net != 2 -> net = 2; printf("pod0 is cut off from the store\n") }
	:: atomic { net != 3 -> net = 3; printf("pod1 is cut off from the store\n") }
#endif
#ifdef GATEWAY_HOLD
#ifndef NO_BLIND
	:: atomic { net != NET_BLIND -> net = NET_BLIND; printf("the heartbeats fail for every pod, the key's calls work\n") }
#endif
	/* A pod's heartbeat reaches the store again after a gap (with
	 * -DREPORT_FIRST, not before the pod reported what it let through
	 * alone), and the pod reads the others'. */
	:: atomic { beats(0) && gone[0] > 0 BEAT_WAITS(0) ->
		printf("pod0's heartbeat reaches the store\n");
		gone[0] = 0; hv[0] = (gone[1] >= NOTICE) }
	:: atomic { beats(1) && gone[1] > 0 BEAT_WAITS(1) ->
		printf("pod1's heartbeat reaches the store\n");
		gone[1] = 0; hv[1] = (gone[0] >= NOTICE) }
	/* A pod that reaches the store again after a gap of its heartbeats
	 * has its open breakers probe with the next call, before its next
	 * heartbeat goes out (StoreReachable). */
	:: atomic { beats(0) && gone[0] > 0 && brk[0] == OPEN ->
		printf("pod0 reaches the store again: its breaker probes now\n");
		brk[0] = CLOSED }
	:: atomic { beats(1) && gone[1] > 0 && brk[1] == OPEN ->
		printf("pod1 reaches the store again: its breaker probes now\n");
		brk[1] = CLOSED }
	/* A pod reads the heartbeats before the tick ends. */
	:: atomic { beats(0) && hv[0] != (gone[1] >= NOTICE) ->
		hv[0] = !hv[0];
		if
		:: hv[0] -> printf("pod0 counts pod1 missing\n")
		:: else -> printf("pod0 counts pod1 live again\n")
		fi }
	:: atomic { beats(1) && hv[1] != (gone[0] >= NOTICE) ->
		hv[1] = !hv[1];
		if
		:: hv[1] -> printf("pod1 counts pod0 missing\n")
		:: else -> printf("pod1 counts pod0 live again\n")
		fi }
#endif
	/* Redis loses its data (FLUSHALL, restart empty, failover to a
	 * replica behind). */
#ifndef NO_FLUSH
	:: atomic {
		printf("store loses its data\n");
		i = 0;
		do
		:: i < NPODS * 2 -> sc[i] = 0; i++
		:: else -> break
		od;
		slost = 0 FORGET }
#endif
	od
}

init {
	atomic { run pod(0); run pod(1) }
}
