package httppath

import "bytes"

// Error is why Normalize refused a path; OK when it did not.
type Error uint8

// The reasons to refuse a path. Only OK is exported: callers tell a
// refusal by its text (String), and keep one answer per Error (NumErrors).
const (
	// OK is a path Normalize accepted.
	OK Error = iota
	pathNotAbsolute
	pathBadEscape
	pathControl
	pathBackslash
	pathEncodedStructure
	pathDoubleEncoded
	pathDotParams
	pathEdgeSpace
	pathFragment

	// NumErrors is the number of Error values, OK included: an array of
	// NumErrors holds one entry per Error.
	NumErrors = int(iota)
)

// errorText are the messages of the 400 answers, by Error.
var errorText = [...]string{
	OK:                   "",
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

// String is the message of the 400 answer to a path refused for e.
func (e Error) String() string { return errorText[e] }

// Normalize appends the normalised form of the raw path (the request
// URI's path, without the query) to dst. On an error, dst is returned as it
// was given, with the reason.
func Normalize(dst, raw []byte) ([]byte, Error) {
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
		var e Error
		if out, i, e = appendSegment(out, raw, i); e != OK {
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
	return out, OK
}

// appendSegment copies one segment of raw, from i to the next "/" or the end,
// to out, decoding what Normalize decodes. It returns the index after
// the segment.
func appendSegment(out, raw []byte, i int) ([]byte, int, Error) {
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
	return out, i, OK
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
// Normalize refuses encoded.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~'
}

// SplitRequestURI splits a request-target into the host of an absolute-form
// target ("" for origin-form), its path and its query (nil when there is no
// "?"; empty when the "?" is last).
func SplitRequestURI(uri []byte) (host, path, query []byte, ok bool) {
	rest := uri
	if len(rest) > 0 && rest[0] != '/' {
		var scheme int
		switch {
		case HasPrefixFold(rest, "http://"):
			scheme = len("http://")
		case HasPrefixFold(rest, "https://"):
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

// HasPrefixFold is bytes.HasPrefix ignoring ASCII case.
func HasPrefixFold(b []byte, prefix string) bool {
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
