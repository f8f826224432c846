package proxy

import "bytes"

// Request paths.
//
// The gateway routes and forwards one and the same path: the request's path
// normalised by normalizePath. Backends differ in how they read a path
// (decoding, case, matrix parameters, backslashes), so anything that two
// readings could disagree on is either made canonical here or refused with
// 400:
//
//   - percent-encoded unreserved characters (letters, digits, "-", "_", "~")
//     are decoded; every other escape is kept, with upper-case hex digits;
//   - "." and ".." segments are removed (".." never climbs above "/") and
//     runs of "/" are merged;
//   - refused: a path that is not absolute, an invalid escape, a control
//     character or NUL (raw or encoded), a backslash (raw or encoded), an
//     encoded "/" or "." (they would change the path's structure once a
//     backend decodes them), the same escaped twice ("%252e"), a dot
//     segment with parameters ("..;x", which some servers read as ".."),
//     a segment that starts or ends with an encoded space, and a "#".
//
// normalizePath allocates nothing beyond growing dst.

// pathError is why normalizePath refused a path; pathOK when it did not.
type pathError uint8

const (
	pathOK pathError = iota
	pathNotAbsolute
	pathBadEscape
	pathControl
	pathBackslash
	pathEncodedStructure
	pathDoubleEncoded
	pathDotParams
	pathEdgeSpace
	pathFragment
)

// pathErrorText are the messages of the 400 answers, by pathError.
var pathErrorText = [...]string{
	pathOK:               "",
	pathNotAbsolute:      "invalid request path: it must start with \"/\"",
	pathBadEscape:        "invalid request path: malformed percent-encoding",
	pathControl:          "invalid request path: control character or NUL",
	pathBackslash:        "invalid request path: backslash (raw or %5C)",
	pathEncodedStructure: "invalid request path: encoded \"/\" or \".\" (%2F, %2E)",
	pathDoubleEncoded:    "invalid request path: double percent-encoding of a separator, dot or control character",
	pathDotParams:        "invalid request path: dot segment with parameters (\"..;\")",
	pathEdgeSpace:        "invalid request path: a segment starts or ends with an encoded space",
	pathFragment:         "invalid request path: fragment (\"#\")",
}

func (e pathError) String() string { return pathErrorText[e] }

// normalizePath appends the normalised form of the raw path (the request
// URI's path, without the query) to dst. On an error, dst is returned as it
// was given, with the reason.
func normalizePath(dst, raw []byte) ([]byte, pathError) {
	if len(raw) == 0 || raw[0] != '/' {
		return dst, pathNotAbsolute
	}
	base := len(dst)
	out := append(dst, '/')
	i := 0
	for i < len(raw) {
		for i < len(raw) && raw[i] == '/' {
			i++
		}
		if i == len(raw) {
			break
		}
		segStart := len(out)
		var e pathError
		if out, i, e = appendSegment(out, raw, i); e != pathOK {
			return dst[:base], e
		}
		seg := out[segStart:]
		switch {
		case isDots(seg, 1):
			out = out[:segStart]
		case isDots(seg, 2):
			out = popSegment(out[:segStart], base)
		case isDotParams(seg):
			return dst[:base], pathDotParams
		case hasEdgeSpace(seg):
			return dst[:base], pathEdgeSpace
		case hasDoubleEncoding(seg):
			return dst[:base], pathDoubleEncoded
		case i < len(raw): // raw[i] is '/'
			out = append(out, '/')
		}
	}
	return out, pathOK
}

// appendSegment copies one segment of raw, from i to the next "/" or the end,
// to out, decoding what normalizePath decodes. It returns the index after
// the segment.
func appendSegment(out, raw []byte, i int) ([]byte, int, pathError) {
	for i < len(raw) && raw[i] != '/' {
		c := raw[i]
		switch {
		case c == '%':
			v, ok := unescape(raw, i)
			if !ok {
				return out, i, pathBadEscape
			}
			switch {
			case v == '/' || v == '.':
				return out, i, pathEncodedStructure
			case v == '\\':
				return out, i, pathBackslash
			case v < 0x20 || v == 0x7f:
				return out, i, pathControl
			case isUnreserved(v):
				out = append(out, v)
			default:
				out = append(out, '%', upperHex(raw[i+1]), upperHex(raw[i+2]))
			}
			i += 3
		case c == '\\':
			return out, i, pathBackslash
		case c < 0x20 || c == 0x7f:
			return out, i, pathControl
		case c == '#':
			return out, i, pathFragment
		default:
			out = append(out, c)
			i++
		}
	}
	return out, i, pathOK
}

var strEncodedPercent = []byte("%25")

// hasDoubleEncoding tells whether the decoded segment has a "%25" followed
// by the hex code of a character refused encoded: "%252F" is "%2F" to a
// backend that decodes twice. It looks at the decoded segment, since
// "%250%61" is "%250a" once "%61" is decoded.
func hasDoubleEncoding(seg []byte) bool {
	for {
		i := bytes.Index(seg, strEncodedPercent)
		if i < 0 {
			return false
		}
		seg = seg[i+3:]
		if doubleEncoded(seg) {
			return true
		}
	}
}

// doubleEncoded tells whether rest starts with the hex code of a character
// refused encoded.
func doubleEncoded(rest []byte) bool {
	if len(rest) < 2 {
		return false
	}
	hi, ok1 := unhex(rest[0])
	lo, ok2 := unhex(rest[1])
	w := hi<<4 | lo
	return ok1 && ok2 && (w == '/' || w == '.' || w == '\\' || w == '%' || w < 0x20 || w == 0x7f)
}

// popSegment removes the last segment of out, which ends with "/"; it never
// goes above the root at base.
func popSegment(out []byte, base int) []byte {
	if len(out)-base <= 1 {
		return out
	}
	j := bytes.LastIndexByte(out[base:len(out)-1], '/')
	return out[:base+j+1]
}

// isDots tells whether seg is "." (n 1) or ".." (n 2).
func isDots(seg []byte, n int) bool {
	if len(seg) != n {
		return false
	}
	for _, c := range seg {
		if c != '.' {
			return false
		}
	}
	return true
}

// isDotParams tells whether seg is "." or ".." followed by ";parameters".
func isDotParams(seg []byte) bool {
	i := bytes.IndexByte(seg, ';')
	return i > 0 && (isDots(seg[:i], 1) || isDots(seg[:i], 2))
}

var strEncodedSpace = []byte("%20")

func hasEdgeSpace(seg []byte) bool {
	return bytes.HasPrefix(seg, strEncodedSpace) || bytes.HasSuffix(seg, strEncodedSpace)
}

// unescape decodes the escape "%XY" at raw[i]; false when it is malformed.
func unescape(raw []byte, i int) (byte, bool) {
	if i+2 >= len(raw) || raw[i] != '%' {
		return 0, false
	}
	hi, ok1 := unhex(raw[i+1])
	lo, ok2 := unhex(raw[i+2])
	return hi<<4 | lo, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// isUnreserved tells the RFC 3986 unreserved characters but ".", which
// normalizePath refuses encoded.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~'
}

// splitRequestURI splits a request-target into the host of an absolute-form
// target ("" for origin-form), its path and its query (nil when there is no
// "?"; empty when the "?" is last).
func splitRequestURI(uri []byte) (host, path, query []byte, ok bool) {
	rest := uri
	if len(rest) > 0 && rest[0] != '/' {
		var scheme int
		switch {
		case hasPrefixFold(rest, "http://"):
			scheme = len("http://")
		case hasPrefixFold(rest, "https://"):
			scheme = len("https://")
		default:
			return nil, nil, nil, false
		}
		rest = rest[scheme:]
		end := bytes.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		host, rest = rest[:end], rest[end:]
		if len(host) == 0 || bytes.IndexByte(host, '@') >= 0 {
			return nil, nil, nil, false // no host, or user info
		}
	}
	if q := bytes.IndexByte(rest, '?'); q >= 0 {
		rest, query = rest[:q], rest[q+1:]
	}
	if len(rest) == 0 {
		rest = strSlash // "http://host" and "http://host?q"
	}
	return host, rest, query, true
}

var strSlash = []byte("/")

// hasPrefixFold is bytes.HasPrefix ignoring ASCII case.
func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if lowerASCII(b[i]) != lowerASCII(prefix[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
