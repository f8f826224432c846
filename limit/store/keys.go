package store

// Key schema.
//
// A limit's key, the LeaseRequest.Key built by AppendKey, is
//
//	[prefix ":"] "{" scope ":" part [":" part ...] "}"
//
// for example "sentinel:{tenant:acme}", "{ip:10.0.0.7}" or
// "{rule:acme:bids}". The whole identity of the limit is the Redis Cluster
// hash tag, so the limits of one hot tenant (its tenant limit, each of its
// rules, each API key) spread over different slots, while every key one
// script touches derives from the same tag and lands in one slot. Bytes that
// would make two identities collide or end the tag early (':', '{', '}',
// '%') are escaped as %XX.
//
// The stores add, after the key, one suffix per algorithm, so that changing
// a limit's algorithm never meets a key of the wrong Redis type:
//
//	<key>":sw"                                 sliding_window: hash of sub-window counters
//	<key>":sl", <key>":sl:m", <key>":sl:ids"   sliding_log: permits zset, meta hash, request-ID zset
//	<key>":tb"                                 token_bucket: hash {tokens, ts}
//	<key>":q:"<period>":"<start ms>            quota: string, the permits counted in the period
//	                                           (for example "{key:abc}:q:day:1767225600000")
//	<key>":cs"                                 concurrency slots: hash {pod: "count expiry_ms"}
//
// RedisStoreOptions.KeyPrefix, when set, goes before all of it followed by
// ':'. Set the prefix in one place only: either there or in AppendKey.
// Every key carries a TTL (see the scripts in lua/).

// AppendKey appends the store key of one limit to dst and returns the
// extended slice: prefix (when not empty) and ':', then the hash tag
// "{scope:part:part...}". It allocates only when dst is too small.
func AppendKey(dst []byte, prefix, scope string, parts ...[]byte) []byte {
	dst = appendKeyHead(dst, prefix, scope)
	for _, p := range parts {
		dst = append(dst, ':')
		dst = appendKeyPart(dst, p)
	}
	return append(dst, '}')
}

// AppendKeyStrings is AppendKey for parts held as strings (tenant and
// resource names).
func AppendKeyStrings(dst []byte, prefix, scope string, parts ...string) []byte {
	dst = appendKeyHead(dst, prefix, scope)
	for _, p := range parts {
		dst = append(dst, ':')
		dst = appendKeyPart(dst, p)
	}
	return append(dst, '}')
}

func appendKeyHead(dst []byte, prefix, scope string) []byte {
	if prefix != "" {
		dst = append(dst, prefix...)
		dst = append(dst, ':')
	}
	dst = append(dst, '{')
	return appendKeyPart(dst, scope)
}

// appendKeyPart appends p with ':', '{', '}' and '%' escaped as %XX.
func appendKeyPart[T string | []byte](dst []byte, p T) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case ':', '{', '}', '%':
			dst = append(dst, '%', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// Suffixes of the keys each algorithm keeps (see the schema above).
const (
	suffixSlidingWindow  = ":sw"
	suffixSlidingLog     = ":sl"
	suffixSlidingLogMeta = ":sl:m"
	suffixSlidingLogIDs  = ":sl:ids"
	suffixTokenBucket    = ":tb"
	suffixQuota          = ":q:" // then the period and its start
)

// AppendKeyPart appends one part of a key with the bytes that would end it
// or collide escaped (as AppendKey escapes its parts), for callers that
// build a part of their own from several values.
func AppendKeyPart(dst, p []byte) []byte { return appendKeyPart(dst, p) }
