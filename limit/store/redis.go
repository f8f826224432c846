package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/lua"
)

// The scripts, run with EVALSHA (EVAL once after NOSCRIPT) by rueidis.
var (
	slidingWindowScript = newLeaseScript(lua.SlidingWindow)
	slidingLogScript    = newLeaseScript(lua.SlidingLog)
	tokenBucketScript   = newLeaseScript(lua.TokenBucket)
	quotaScript         = newLeaseScript(lua.Quota)
)

// RedisStoreOptions configure a RedisStore. The zero value is usable.
type RedisStoreOptions struct {
	// KeyPrefix, when not empty, is put with a ':' before every key, for
	// example "sentinel" (main passes redis.key_prefix). Keep the hash tag
	// out of it. Default: none.
	KeyPrefix string
}

// RedisStore is the Store shared by every pod: one Lua script per Lease, run
// atomically in Redis with Redis' own clock, on one node or a cluster (each
// call touches one slot). It is safe for concurrent use.
type RedisStore struct {
	client rueidis.Client
	prefix string // KeyPrefix + ":" or ""
	nodes  *storeNodes
	// clocks are the nodes' clocks (by NodeOf's index), learned from their
	// answers: a call's deadline is sent in the clock of the node that runs
	// it, so that a call that runs too late grants nothing. The nodes of a
	// cluster are separate machines whose clocks differ; one offset learned
	// from all of them would put each node's deadlines off by the
	// difference. Nodes past MaxNodes share the last clock, as they share
	// the last breaker.
	clocks [MaxNodes]nodeClock
	// batch sends the calls of a single node (nil on a cluster).
	batch *batcher
}

// nodeClock is one node's clock: its offset from ours (microseconds),
// learned from every answer of the node; known is set after the first.
type nodeClock struct {
	offset atomic.Int64
	known  atomic.Bool
}

var (
	_ Store   = (*RedisStore)(nil)
	_ NodeMap = (*RedisStore)(nil)
)

// NewRedisStore returns a RedisStore over client. The client is shared with
// the rest of the process: Close does not close it.
func NewRedisStore(client rueidis.Client, opts RedisStoreOptions) *RedisStore {
	s := &RedisStore{client: client, nodes: newStoreNodes(client)}
	if !s.nodes.cluster {
		s.batch = &batcher{client: client}
	}
	if opts.KeyPrefix != "" {
		s.prefix = opts.KeyPrefix + ":"
	}
	return s
}

// Lease runs the request's algorithm script. It returns when Redis answers
// or ctx is done, whichever comes first. When ctx has a deadline, the script
// gets it in the clock of the key's node, less a margin for the answer's way
// back: a call that Redis runs after it (Redis was paused or slow) grants
// nothing, so a timed-out call does not spend budget (the first calls to a
// node, before its clock is known, go without).
func (s *RedisStore) Lease(ctx context.Context, req *LeaseRequest) (LeaseResult, error) {
	if err := checkLease(req); err != nil {
		return LeaseResult{}, err
	}
	clock := s.clockOf(req.Key)
	sent := time.Now()
	at := clock.now(sent) // a quota's period: see quotaAttempts
	for attempt := 1; ; attempt++ {
		a, nowUS, err := s.run(ctx, req, clock, sent, at)
		switch {
		case err != nil:
			return LeaseResult{}, fmt.Errorf("limit: redis lease for %q: %w", req.Key, err)
		case a.late:
			return LeaseResult{}, fmt.Errorf("limit: redis lease for %q: %w", req.Key, ErrStoreLate)
		case a.stale && attempt < quotaAttempts:
			at = time.UnixMicro(nowUS)
		case a.stale:
			return LeaseResult{}, fmt.Errorf("limit: redis lease for %q: the quota's period moved on %d times under the call", req.Key, attempt)
		default:
			return a.resultFor(req), nil
		}
	}
}

// quotaAttempts bounds the runs of one quota call. The period of a quota
// is computed here (Go has the zone database, Lua does not) from the
// estimate of the node's clock, and the script refuses a period that does
// not hold its own TIME, answering that time: Redis' clock decides, for
// every pod alike. A refused call runs again with the period of the
// node's answer, which can only be refused again when a boundary passes
// between the two runs; periods are at least 30 minutes long.
const quotaAttempts = 3

// run runs req's script once; first is when the call was first sent
// (RunWithin counts from then, whatever the attempt), at is when the caller
// thinks the node's clock is (a quota's period is the one that holds it).
func (s *RedisStore) run(ctx context.Context, req *LeaseRequest, clock *nodeClock, first, at time.Time) (leaseAnswer, int64, error) {
	c := getRedisCall()
	c.build(s.prefix, req, clock.deadline(ctx, first, req.RunWithin), at)
	var msg rueidis.RedisMessage
	var sent time.Time
	var err error
	if s.batch != nil {
		msg, sent, err = s.batch.do(ctx, c)
	} else {
		sent = time.Now()
		msg, err = c.script.one.Exec(ctx, s.client, c.keys, c.args).ToMessage()
	}
	a, nowUS, err := parseAnswer(msg, err)
	if err != nil {
		// On a ctx timeout rueidis may still hold the command, whose strings
		// point into c.buf: never reuse c then.
		return a, 0, err
	}
	putRedisCall(c)
	clock.learn(sent, time.Now(), nowUS)
	return a, nowUS, nil
}

// now is t in the node's clock, as learned; t while it is not known.
func (c *nodeClock) now(t time.Time) time.Time {
	if c == nil || !c.known.Load() {
		return t
	}
	return t.Add(time.Duration(c.offset.Load()) * time.Microsecond)
}

// clockOf returns the clock of key's node, or nil when the node is not
// known yet (a cluster whose slot map has not been read): a clock learned
// from whichever node answered would be another node's.
func (s *RedisStore) clockOf(key []byte) *nodeClock {
	i, ok := s.nodes.lookup(key)
	if !ok {
		return nil
	}
	return &s.clocks[i]
}

// deadline is ctx's deadline, or sent plus runWithin when that is sooner,
// in the node's clock (microseconds), less a quarter of the time left (at
// least 200µs) for the answer to travel back; 0 for none, and while the
// node's clock is not known (c nil, or no answer from it yet).
func (c *nodeClock) deadline(ctx context.Context, sent time.Time, runWithin time.Duration) int64 {
	d, ok := ctx.Deadline()
	if runWithin > 0 && (!ok || sent.Add(runWithin).Before(d)) {
		d, ok = sent.Add(runWithin), true
	}
	if !ok || c == nil || !c.known.Load() {
		return 0
	}
	margin := max(d.Sub(sent)/4, 200*time.Microsecond)
	return max(d.Add(-margin).UnixMicro()+c.offset.Load(), 1)
}

// learn updates the node's offset from one answer: the node read its clock
// about halfway between sent and got. A nil c learns nothing.
func (c *nodeClock) learn(sent, got time.Time, redisUS int64) {
	if c == nil {
		return
	}
	mid := sent.UnixMicro() + got.Sub(sent).Microseconds()/2
	sample := redisUS - mid
	if !c.known.Load() {
		c.offset.Store(sample)
		c.known.Store(true)
		return
	}
	old := c.offset.Load()
	c.offset.Store(old + (sample-old)/8) // a lost update among racing calls is harmless
}

// nodeOf implements nodeMap: the node of the slot of key's hash tag (every
// key of the limiter has one, so the prefix does not matter).
func (s *RedisStore) NodeOf(key []byte) int { return s.nodes.NodeOf(key) }

// nodeName implements nodeMap: the node's host:port.
func (s *RedisStore) NodeName(i int) string { return s.nodes.NodeName(i) }

// Ping checks that Redis answers.
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("limit: redis ping: %w", err)
	}
	return nil
}

// Close does nothing: the rueidis client belongs to whoever made it.
func (s *RedisStore) Close() {}

// parseAnswer reads {granted, remaining, retry_after_ms, reset_ms, status,
// ref, now_us, used_ref, free_ms[, seq[, made_ago_ms]]} and returns the
// answer and Redis' clock.
func parseAnswer(msg rueidis.RedisMessage, err error) (leaseAnswer, int64, error) {
	if err != nil {
		return leaseAnswer{}, 0, err
	}
	msgs, err := msg.ToArray()
	if err != nil {
		return leaseAnswer{}, 0, err
	}
	if len(msgs) < 9 || len(msgs) > 11 {
		return leaseAnswer{}, 0, fmt.Errorf("script returned %d values, want 9 to 11", len(msgs))
	}
	v := [11]int64{10: -1} // made_ago_ms: not known unless said
	for i := range msgs {
		if v[i], err = msgs[i].AsInt64(); err != nil {
			return leaseAnswer{}, 0, fmt.Errorf("script value %d: %w", i, err)
		}
	}
	return leaseAnswer{granted: v[0], remaining: v[1], retryMS: v[2], resetMS: v[3],
		duplicate: v[4] == 1, late: v[4] == 2, repeated: v[4] == 3, stale: v[4] == 4, ref: v[5], usedRef: v[7], freeMS: v[8], seq: v[9], madeMS: v[10]}, v[6], nil
}

// redisCall holds one call's keys and arguments. They are zero-copy strings
// over buf, valid only for the call.
type redisCall struct {
	script *leaseScript
	buf    []byte
	ends   [maxKeys + maxArgs]int // ends of the pieces written into buf
	n      int
	keyArr [maxKeys]string
	argArr [maxArgs]string
	keys   []string
	args   []string
}

// maxKeys and maxArgs are the most KEYS and ARGV of a lease script:
// sliding_log's 15 arguments and two for each unleased part.
const (
	maxKeys = 3
	maxArgs = 15 + 2*UnleasedParts
)

var redisCallPool sync.Pool

func getRedisCall() *redisCall {
	if c, ok := redisCallPool.Get().(*redisCall); ok {
		return c
	}
	return &redisCall{buf: make([]byte, 0, 256)}
}

func putRedisCall(c *redisCall) {
	if cap(c.buf) > 4096 {
		return
	}
	c.keyArr, c.argArr = [maxKeys]string{}, [maxArgs]string{}
	c.keys, c.args, c.script = nil, nil, nil
	redisCallPool.Put(c)
}

// build writes req's script and its keys and ARGV into c; deadline is in
// Redis' clock (microseconds), 0 for none; a quota counts in the period
// that holds at.
func (c *redisCall) build(prefix string, req *LeaseRequest, deadline int64, at time.Time) {
	c.buf, c.n = c.buf[:0], 0
	p := &req.Params
	leaseMS := ceilMS(req.LeaseTTL)
	var script *leaseScript
	var nkeys int
	switch p.Algorithm {
	case SlidingLog:
		script, nkeys = slidingLogScript, 3
		c.key(prefix, req.Key, suffixSlidingLog)
		c.key(prefix, req.Key, suffixSlidingLogMeta)
		c.key(prefix, req.Key, suffixSlidingLogIDs)
		w := ceilMS(p.Window)
		c.ints(p.Limit, w, req.Want, leaseMS)
		c.piece(append(c.buf, req.RequestID...))
	case Quota:
		script, nkeys = quotaScript, 1
		start, end := quotaBounds(at, p)
		b := append(c.buf, prefix...)
		b = append(b, req.Key...)
		b = append(b, suffixQuota...)
		b = append(b, p.Period.String()...)
		b = append(b, ':')
		c.piece(strconv.AppendInt(b, start, 10))
		c.ints(p.Limit, req.Want, start, end)
	case TokenBucket:
		script, nkeys = tokenBucketScript, 1
		c.key(prefix, req.Key, suffixTokenBucket)
		c.ints(p.Capacity)
		c.piece(strconv.AppendFloat(c.buf, p.RefillRate, 'g', -1, 64))
		c.ints(req.Want, leaseMS)
	default:
		script, nkeys = slidingWindowScript, 1
		c.key(prefix, req.Key, suffixSlidingWindow)
		w := ceilMS(p.Window)
		c.ints(p.Limit, w, req.Want, leaseMS, granularityMS(w, leaseMS))
	}
	c.ints(req.need(), req.Return, req.ReturnRef, deadline, req.Used, req.Unleased, int64(req.UnleasedAgo/time.Millisecond), ceilMS(req.UseWithin))
	switch p.Algorithm {
	case SlidingLog:
		c.ints(req.RequestIDRetries, ceilMS(req.RequestIDWindow))
	case TokenBucket:
		c.ints(req.levelArg(), int64(req.LevelAgo/time.Millisecond))
	}
	// The parts up to the last that holds permits: most calls send none.
	parts := len(req.UnleasedBefore)
	for parts > 0 && req.UnleasedBefore[parts-1].N == 0 {
		parts--
	}
	for _, part := range req.UnleasedBefore[:parts] {
		c.ints(part.N, int64(part.Ago/time.Millisecond))
	}
	c.strings(nkeys)
	c.script = script
}

func (c *redisCall) key(prefix string, key []byte, suffix string) {
	b := append(c.buf, prefix...)
	b = append(b, key...)
	c.piece(append(b, suffix...))
}

func (c *redisCall) ints(vs ...int64) {
	for _, v := range vs {
		c.piece(strconv.AppendInt(c.buf, v, 10))
	}
}

func (c *redisCall) piece(b []byte) {
	c.buf = b
	c.ends[c.n] = len(b)
	c.n++
}

// strings cuts buf into the keys and args, after every append is done (an
// append may move buf).
func (c *redisCall) strings(nkeys int) {
	start := 0
	for i := 0; i < c.n; i++ {
		s := rueidis.BinaryString(c.buf[start:c.ends[i]])
		if i < nkeys {
			c.keyArr[i] = s
		} else {
			c.argArr[i-nkeys] = s
		}
		start = c.ends[i]
	}
	c.keys, c.args = c.keyArr[:nkeys], c.argArr[:c.n-nkeys]
}
