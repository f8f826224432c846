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
 *
 * Sizes: NPODS 2 (the tick and I2 read pods 0 and 1 by name), LIMIT 3 (a
 * share of 1, so that a pod may take more than its share while the other
 * is idle), MAXLEASE 2, faults without bound (-DNO_DOWN, -DNO_CUT,
 * -DNO_FLUSH, -DNO_RELOAD leave one out). With -DBFS pan finds the
 * shortest counterexample.
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
#if defined(HELD_WHEN_CUT) || defined(NO_RESERVE)
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

/* Scratch, outside the state: every step that sets one reads it in the
 * same atomic step. */
#ifdef BFS
byte want, res, q, k, total, i; /* pan -DBFS (shortest trails) takes no hidden */
#else
hidden byte want, res, q, k, total, i;
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
#ifndef FIRST_USES
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

/* reserved: what the store keeps free for the pods other than p. */
inline reserved(p) {
	res = 0;
#ifndef NO_RESERVE
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
	printf("pod%d: lease call runs, want %d, granted %d (store: pod %d, others reserved %d)\n", p, want, fg[p], win(sc, p) - fg[p], res);
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
	xp[p] = 0;
	brk[p] = OPEN;
	fallback(p)
}

/* The pod reads the answer (refill): trimmed to its share while the store
 * recovers (keepShare), the request uses one, the rest is the lease. */
inline answered(p) {
	brk[p] = CLOSED;
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
		refused(p)
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
	:: atomic { !fly[p] && held[p] == 0 ->
		if
		:: brk[p] == OPEN -> fallback(p)
		:: brk[p] != OPEN && unreachable(p) -> callFailed(p)
		:: brk[p] != OPEN && !unreachable(p) ->
			if
			:: want = 1
			:: MAXLEASE > 1 -> want = MAXLEASE
			fi;
			storeRuns(p, want)
		fi }
	:: atomic { fly[p] -> answered(p) }
	:: atomic { fly[p] -> gaveUp(p) }
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
			i++
		:: else -> break
		od;
		if
		:: slost < WIN -> slost++
		:: else
		fi }
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
		slost = 0 }
#endif
	od
}

init {
	atomic { run pod(0); run pod(1) }
}
