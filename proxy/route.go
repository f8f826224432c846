package proxy

import (
	"bytes"
	"sort"
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/proxy/httppath"
)

// Route matching.
//
// A route's path_prefix matches on segment boundaries: "/api" matches "/api",
// "/api/" and "/api/x", but not "/apix" (nginx would match "/apix"; here a
// prefix names a subtree, which is what operators mean and what keeps a route
// for "/admin" from capturing "/administrator"). A prefix that ends with "/"
// ("/api/", and "/" itself) matches every path that starts with it.
//
// Routes with a host are consulted first, as nginx picks the server before the
// location: when the request's Host (port dropped, case-insensitive) equals a
// route's host, the longest matching prefix among that host's routes wins;
// otherwise the longest matching prefix among the host-less routes. Paths are
// normalised by httppath.Normalize first ("/a/../b" is "/b"), and the same path
// is forwarded, so "/api/../admin" cannot slip past a route. A ";" ends a
// segment as "/" does ("/search;x=1" is under "/search"), since some
// backends drop such parameters. A route with path_case_insensitive
// compares its prefix ignoring ASCII case; the forwarded path then carries
// the prefix as configured (canonicalize).
//
// The compiled table is immutable once published (table.go); match
// allocates nothing. Routes are kept sorted by prefix length, longest first,
// and scanned linearly: route tables are small (tens), and a linear scan
// over a few cache lines beats a trie.

// route is a compiled Route with what the request path needs of it, bound
// when its table is built and fixed for the table's life.
type route struct {
	Route
	prefix []byte // PathPrefix
	subdir bool   // prefix ends with "/"

	pool Doer // the upstream pool
	// bodyTimeout bounds the upload of a streamed body: the pool's
	// timeout, which the upload would otherwise spend (0: none).
	bodyTimeout time.Duration
	conc        concurrency    // the upstream's concurrency limit; nil: none
	concRoute   adaptive.Route // the route's latency baseline in conc
	metrics     *routeMetrics  // set when the table is published
}

// Table is one generation of the routes: it matches requests to routes,
// each bound to its pool, concurrency limit and metrics. Build it with
// Server.NewTable and publish it with Server.SetTable.
type Table struct {
	byHost  map[string][]*route // lower-case host → routes, longest prefix first
	generic []*route            // host-less routes, longest prefix first
	all     []*route            // in config order
}

func compileRoutes(routes []Route) *Table {
	t := &Table{byHost: make(map[string][]*route)}
	for _, r := range routes {
		cr := &route{Route: r, prefix: []byte(r.PathPrefix), subdir: strings.HasSuffix(r.PathPrefix, "/")}
		t.all = append(t.all, cr)
		if r.Host == "" {
			t.generic = append(t.generic, cr)
			continue
		}
		h := strings.ToLower(r.Host)
		t.byHost[h] = append(t.byHost[h], cr)
	}
	byLen := func(rs []*route) {
		sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].prefix) > len(rs[j].prefix) })
	}
	byLen(t.generic)
	for _, rs := range t.byHost {
		byLen(rs)
	}
	return t
}

// match returns the route for host (the Host header, port allowed) and path,
// or nil.
func (t *Table) match(host, path []byte) *route {
	if len(t.byHost) > 0 {
		var buf [256]byte
		if h, ok := lowerHost(buf[:0], host); ok {
			if r := matchPrefix(t.byHost[string(h)], path); r != nil {
				return r
			}
		}
	}
	return matchPrefix(t.generic, path)
}

func matchPrefix(rs []*route, path []byte) *route {
	for _, r := range rs {
		if r.matches(path) {
			return r
		}
	}
	return nil
}

func (r *route) matches(path []byte) bool {
	if !r.hasPrefix(path) {
		return false
	}
	return r.subdir || len(path) == len(r.prefix) || path[len(r.prefix)] == '/' || path[len(r.prefix)] == ';'
}

// hasPrefix is bytes.HasPrefix, ignoring ASCII case for a case-insensitive
// route.
func (r *route) hasPrefix(path []byte) bool {
	if !r.PathCaseInsensitive {
		return bytes.HasPrefix(path, r.prefix)
	}
	return httppath.HasPrefixFold(path, r.PathPrefix)
}

// canonicalize rewrites the matched prefix of path in place to the route's
// own spelling, so that a case-insensitive route forwards what it matched.
func (r *route) canonicalize(path []byte) {
	if r.PathCaseInsensitive {
		copy(path, r.prefix)
	}
}

// lowerHost drops the port from a Host header value and lower-cases it into
// dst. It reports false when the host does not fit dst's capacity.
func lowerHost(dst, host []byte) ([]byte, bool) {
	if n := len(host); n > 0 && host[0] == '[' { // [v6]:port
		if i := bytes.IndexByte(host, ']'); i > 0 {
			host = host[:i+1]
		}
	} else if i := bytes.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if len(host) > cap(dst) {
		return dst, false
	}
	for _, c := range host {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}
