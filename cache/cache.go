package cache

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/fastcache"
	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
)

// Cache holds upstream responses, bounded in bytes. Safe for concurrent use.
//
// An entry holds the status, the end-to-end headers and the body of a
// response, and its expiry; an expired entry is a miss. Entries larger than
// 1/64 of the cache (1MiB at the 64MB default) are not stored, so that one
// answer cannot flush the cache.
type Cache struct {
	fc      *fastcache.Cache
	maxItem int
	now     func() time.Time

	set                  *metrics.Set // this cache's series, registered from New to Close
	hits, misses, stores *metrics.Counter
	skips                atomic.Uint64
}

// Stats counts a Cache's work since it was built.
type Stats struct {
	Hits, Misses, Stores uint64
	// Skips are responses Set declined: not 200, not storable by their
	// Cache-Control or Vary, streamed, or too large.
	Skips uint64
	// Bytes is the memory the entries take, Entries their number (an entry
	// over 64KB counts once per 64KB chunk).
	Bytes, Entries uint64
}

var entryPool bytebufferpool.Pool

// New builds a cache bounded by cfg.MaxBytes (at least 32MiB, fastcache's
// smallest size) of cfg, a provisioned section (Config.SetDefaults), and
// registers its metrics until Close.
func New(cfg Config) *Cache {
	maxBytes := max(int(cfg.MaxBytes), minBytes)
	set := metrics.NewSet()
	c := &Cache{
		fc: fastcache.New(maxBytes), maxItem: maxBytes / 64, now: time.Now, set: set,
		hits:   set.NewCounter(`sentinel_cache_hits_total`),
		misses: set.NewCounter(`sentinel_cache_misses_total`),
		stores: set.NewCounter(`sentinel_cache_stores_total`),
	}
	set.NewGauge(`sentinel_cache_bytes`, func() float64 { return float64(c.Stats().Bytes) })
	metrics.RegisterSet(set)
	return c
}

// Close unregisters the cache's metrics and drops its entries, returning
// their memory; call it when nothing serves from c any more.
func (c *Cache) Close() {
	metrics.UnregisterSet(c.set, true)
	c.fc.Reset()
}

// Get copies the live entry for key into dst, with an Age header, and
// reports whether there was one. On a miss dst is left as it was.
func (c *Cache) Get(key []byte, dst *fasthttp.Response) bool {
	bb := entryPool.Get()
	defer entryPool.Put(bb)
	bb.B = c.fc.GetBig(bb.B[:0], key)
	now := c.now().UnixNano()
	e, ok := parseEntry(bb.B)
	if !ok || now >= e.expires {
		c.misses.Inc()
		return false
	}
	e.writeTo(dst)
	var age [20]byte
	dst.Header.SetCanonical(strAge, strconv.AppendInt(age[:0], max(0, (now-e.stored)/int64(time.Second)), 10))
	c.hits.Inc()
	return true
}

// Set stores resp under key for ttl when it may be shared: status 200, no
// `no-store` or `private` in Cache-Control, no Vary other than
// Accept-Encoding (and then not content-encoded), a buffered body, and a
// size within the cache's per-entry bound. Hop-by-hop headers, Set-Cookie,
// Content-Length and Age are not stored. Set does not see the request: the
// caller must not store answers that depend on credentials (RFC 9111 §3.5).
func (c *Cache) Set(key []byte, resp *fasthttp.Response, ttl time.Duration) {
	if ttl <= 0 || !storable(resp) {
		c.skips.Add(1)
		return
	}
	bb := entryPool.Get()
	defer entryPool.Put(bb)
	now := c.now()
	bb.B = appendEntry(bb.B[:0], resp, now.Add(ttl).UnixNano(), now.UnixNano())
	if len(bb.B) > c.maxItem {
		c.skips.Add(1)
		return
	}
	c.fc.SetBig(key, bb.B)
	c.stores.Inc()
}

// MaxBody is the largest answer body c may keep (its entries are bounded,
// and an entry also holds the status and headers).
func (c *Cache) MaxBody() int { return c.maxItem }

// Stats returns c's counters and size.
func (c *Cache) Stats() Stats {
	var fs fastcache.Stats
	c.fc.UpdateStats(&fs)
	return Stats{
		Hits: c.hits.Get(), Misses: c.misses.Get(), Stores: c.stores.Get(), Skips: c.skips.Load(),
		Bytes: fs.BytesSize, Entries: fs.EntriesCount,
	}
}
