package store

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/lua"
)

// slotsScript is lua/slots.lua, run with EVALSHA by rueidis.
var slotsScript = rueidis.NewLuaScript(lua.Slots)

// Slots runs req with one script call on the node of the key's hash tag,
// in Redis' clock. It returns when Redis answers or ctx is done, whichever
// comes first; a call that ctx gave up on may still run (see Held).
func (s *RedisStore) Slots(ctx context.Context, req *SlotRequest) (SlotResult, error) {
	if err := checkSlots(req); err != nil {
		return SlotResult{}, err
	}
	c := getRedisCall()
	c.buildSlots(s.prefix, req)
	a, err := parseSlots(slotsScript.Exec(ctx, s.client, c.keys, c.args))
	if err != nil {
		// rueidis may still hold the command, whose strings point into
		// c.buf: never reuse c then.
		return SlotResult{}, fmt.Errorf("limit: redis slots for %q: %w", req.Key, err)
	}
	putRedisCall(c)
	return a.result(), nil
}

// buildSlots writes the key and ARGV of slots.lua for req into c.
func (c *redisCall) buildSlots(prefix string, req *SlotRequest) {
	c.buf, c.n = c.buf[:0], 0
	c.key(prefix, req.Key, suffixSlots)
	c.piece(append(c.buf, req.Pod...))
	c.ints(req.Limit, req.Release, req.Want, req.need(), ceilMS(req.TTL))
	c.strings(1)
}

// parseSlots reads {granted, held, in_use, free_in_ms}.
func parseSlots(resp rueidis.RedisResult) (slotsAnswer, error) {
	msgs, err := resp.ToArray()
	if err != nil {
		return slotsAnswer{}, err
	}
	if len(msgs) != 4 {
		return slotsAnswer{}, fmt.Errorf("script returned %d values, want 4", len(msgs))
	}
	var v [4]int64
	for i := range msgs {
		if v[i], err = msgs[i].AsInt64(); err != nil {
			return slotsAnswer{}, fmt.Errorf("script value %d: %w", i, err)
		}
	}
	return slotsAnswer{granted: v[0], held: v[1], inUse: v[2], freeMS: v[3]}, nil
}
