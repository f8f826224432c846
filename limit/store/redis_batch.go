package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"
)

// A single Redis node spends about as much CPU reading, parsing and
// answering one script call as running a rare key's script (make
// bench-rls: the 100k row). While a call is on its way to Redis, the calls
// that come meanwhile wait and go together as one call of the script's
// batch form, which runs each of them as the script alone would, one after
// another, and answers each its own answer. A call that finds none on its
// way goes at once, alone: batching adds no wait to an idle store, and at
// most one call's time to a busy one. A call whose caller stops waiting
// before it is sent is never sent.
//
// Only on a single node: a cluster runs a script on one slot, and a
// batch's keys are on many.

// maxBatch bounds the calls of one batch: a batch is one script run, during
// which Redis serves nothing else (each call of a rare key costs it a few
// microseconds).
const maxBatch = 64

var batchSize = metrics.NewPrometheusHistogramExt(`sentinel_redis_batch_calls`, []float64{1, 2, 4, 8, 16, 32, 64})

// leaseScript is a lease script, alone and in its batch form.
type leaseScript struct{ one, batch *rueidis.Lua }

func newLeaseScript(src string) *leaseScript {
	return &leaseScript{one: rueidis.NewLuaScript(src), batch: batchForm(src)}
}

// batchForm is a lease script's batch form: ARGV[1] is the number of keys
// of each call; then each call's arguments, after their count. KEYS are
// the calls' keys in order. It answers the calls' answers in order; a call
// that fails answers its error, as alone, and the others go on.
func batchForm(src string) *rueidis.Lua {
	var b strings.Builder
	b.WriteString("local function one(KEYS, ARGV)\n")
	b.WriteString(src)
	b.WriteString(`
end
local nk, k, i, out = tonumber(ARGV[1]), 1, 2, {}
while i <= #ARGV do
  local na, keys, args = tonumber(ARGV[i]), {}, {}
  for j = 1, nk do keys[j] = KEYS[k + j - 1] end
  for j = 1, na do args[j] = ARGV[i + j] end
  k, i = k + nk, i + na + 1
  local ok, r = pcall(one, keys, args)
  if not ok and not (type(r) == 'table' and r.err) then r = {err = tostring(r)} end
  out[#out + 1] = r
end
return out
`)
	return rueidis.NewLuaScript(b.String())
}

// batcher sends the calls of one Redis node: at most one batch on its way
// at a time, the calls that come meanwhile queued for the next.
type batcher struct {
	client rueidis.Client
	mu     sync.Mutex
	busy   bool          // a batch is on its way
	queue  []*queuedCall // the calls for the next batch, oldest first
}

// queuedCall is one call given to a batcher.
type queuedCall struct {
	c    *redisCall
	ctx  context.Context
	done chan struct{} // closed once answered, or made the next leader
	lead bool          // set before done closes: send the next batch
	msg  rueidis.RedisMessage
	err  error
	sent time.Time // when its batch went
}

// do sends c's script call, alone or with others, and returns its answer
// and when its batch was sent.
func (bt *batcher) do(ctx context.Context, c *redisCall) (rueidis.RedisMessage, time.Time, error) {
	q := &queuedCall{c: c, ctx: ctx}
	bt.mu.Lock()
	if !bt.busy {
		bt.busy = true
		bt.mu.Unlock()
		bt.lead(q)
		return q.msg, q.sent, q.err
	}
	q.done = make(chan struct{})
	bt.queue = append(bt.queue, q)
	bt.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
		if bt.drop(q) {
			return rueidis.RedisMessage{}, time.Time{}, ctx.Err()
		}
		<-q.done // taken into a batch: its answer comes with the batch's
	}
	if q.lead {
		bt.lead(q)
	}
	return q.msg, q.sent, q.err
}

// drop takes q out of the queue; false when a batch has taken it.
func (bt *batcher) drop(q *queuedCall) bool {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	for i, o := range bt.queue {
		if o == q {
			bt.queue = append(bt.queue[:i], bt.queue[i+1:]...)
			return true
		}
	}
	return false
}

// lead sends q with the queued calls of its script, then makes the oldest
// call queued the next leader, or marks the batcher idle.
func (bt *batcher) lead(q *queuedCall) {
	bt.mu.Lock()
	batch := []*queuedCall{q}
	rest := bt.queue[:0]
	for _, o := range bt.queue {
		if o.c.script == q.c.script && len(batch) < maxBatch {
			batch = append(batch, o)
		} else {
			rest = append(rest, o)
		}
	}
	clear(bt.queue[len(rest):])
	bt.queue = rest
	bt.mu.Unlock()
	bt.send(batch)
	bt.mu.Lock()
	var next *queuedCall
	if len(bt.queue) > 0 {
		next = bt.queue[0]
		bt.queue = append(bt.queue[:0], bt.queue[1:]...)
	} else {
		bt.busy = false
	}
	bt.mu.Unlock()
	if next != nil {
		next.lead = true
		close(next.done)
	}
}

// send runs the batch and gives each call its answer (the leader, first,
// gets its own without a signal).
func (bt *batcher) send(batch []*queuedCall) {
	sent := time.Now()
	batchSize.Update(float64(len(batch)))
	if len(batch) == 1 {
		q := batch[0]
		q.msg, q.err = q.c.script.one.Exec(q.ctx, bt.client, q.c.keys, q.c.args).ToMessage()
		q.sent = sent
		return
	}
	ctx, cancel := batchContext(batch)
	keys, args := batchArgs(batch)
	answers, err := batch[0].c.script.batch.Exec(ctx, bt.client, keys, args).ToArray()
	cancel()
	if err == nil && len(answers) != len(batch) {
		err = fmt.Errorf("batch of %d calls answered %d", len(batch), len(answers))
	}
	for i, q := range batch {
		q.sent, q.err = sent, err
		if err == nil {
			q.msg = answers[i]
		}
		if i > 0 {
			close(q.done)
		}
	}
}

// batchContext is done when the last of the batch's callers stops
// waiting: a caller that gave up does not end the others' calls.
func batchContext(batch []*queuedCall) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// batchArgs lays the batch's calls out for the batch form.
func batchArgs(batch []*queuedCall) (keys, args []string) {
	nk := len(batch[0].c.keys)
	keys = make([]string, 0, nk*len(batch))
	args = make([]string, 0, 1+len(batch)*(1+maxArgs))
	args = append(args, strconv.Itoa(nk))
	for _, q := range batch {
		keys = append(keys, q.c.keys...)
		args = append(args, strconv.Itoa(len(q.c.args)))
		args = append(args, q.c.args...)
	}
	return keys, args
}
