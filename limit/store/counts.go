package store

import (
	"cmp"
	"slices"
)

// counts are permits counted by time, for the in-process mirrors of the
// sliding window and the sliding log: a sorted list of (at, n), where at is
// the millisecond from which a count stops mattering once a window has passed
// (a sub-window's end, a lease's expiry).
type counts []countAt

type countAt struct {
	at int64 // ms
	n  int64
}

func (c counts) find(at int64) (int, bool) {
	return slices.BinarySearchFunc(c, at, func(e countAt, t int64) int { return cmp.Compare(e.at, t) })
}

// add counts n permits at at, keeping the list sorted.
func (c *counts) add(at, n int64) {
	i, found := c.find(at)
	if found {
		(*c)[i].n += n
		return
	}
	*c = slices.Insert(*c, i, countAt{at: at, n: n})
}

// unadd uncounts n returned permits counted at at.
func (c *counts) unadd(at, n int64) {
	i, found := c.find(at)
	if !found {
		return
	}
	if (*c)[i].n <= n {
		*c = slices.Delete(*c, i, i+1)
		return
	}
	(*c)[i].n -= n
}

// move re-dates up to n permits counted at from to the earlier to (a lease
// used up before its expiry); nothing moves when to is not earlier.
func (c *counts) move(from, to, n int64) {
	i, found := c.find(from)
	if !found || to >= from || n <= 0 {
		return
	}
	n = min(n, (*c)[i].n)
	c.unadd(from, n)
	c.add(to, n)
}

// expire drops the counts at or before upTo (the script's HDEL of dead
// sub-windows, ZREMRANGEBYSCORE -inf upTo).
func (c *counts) expire(upTo int64) {
	i := 0
	for i < len(*c) && (*c)[i].at <= upTo {
		i++
	}
	*c = (*c)[:copy(*c, (*c)[i:])]
}

// total is the number of permits counted.
func (c counts) total() int64 {
	var n int64
	for _, e := range c {
		n += e.n
	}
	return n
}

// resetMS is how long until nothing counted matters any more (0 when empty).
func (c counts) resetMS(now, windowMS int64) int64 {
	if len(c) == 0 {
		return 0
	}
	return c[len(c)-1].at + windowMS - now
}

// firstFreeMS is how long until the oldest count stops mattering (0 when
// empty).
func (c counts) firstFreeMS(now, windowMS int64) int64 {
	if len(c) == 0 {
		return 0
	}
	return max(c[0].at+windowMS-now, 0)
}

// retry is how long until enough of the oldest counts stop mattering for
// need permits to be granted; -1 when need is over the limit.
func (c counts) retry(now, limit, used, need, windowMS int64) int64 {
	if limit <= 0 {
		return windowMS
	}
	if need > limit {
		return -1
	}
	want, freed := used-limit+need, int64(0)
	for _, e := range c {
		freed += e.n
		if freed >= want {
			return e.at + windowMS - now
		}
	}
	return 0
}
