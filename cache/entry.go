package cache

import (
	"bytes"
	"encoding/binary"

	"github.com/valyala/fasthttp"
)

// A cache entry is laid out as
//
//	version(1) expires(8) stored(8) status(2) headers(2)
//	{ keyLen(2) valueLen(4) key value } * headers
//	body
//
// with integers big-endian and times in unix nanoseconds.
const (
	entryVersion    = 1
	entryHeaderSize = 1 + 8 + 8 + 2 + 2
)

var (
	strAge            = []byte("Age")
	strCacheControl   = []byte("Cache-Control")
	strVary           = []byte("Vary")
	strAcceptEncoding = []byte("Accept-Encoding")
	strIdentity       = []byte("identity")
	strNoStore        = []byte("no-store")
	strPrivate        = []byte("private")
	strConnection     = []byte("Connection")

	// notStored are the response headers an entry leaves out: hop-by-hop
	// ones (RFC 9110 §7.6.1), cookies, and those Get recomputes.
	notStored = [][]byte{
		[]byte("Connection"), []byte("Proxy-Connection"), []byte("Keep-Alive"),
		[]byte("Proxy-Authenticate"), []byte("Proxy-Authorization"), []byte("Te"),
		[]byte("Trailer"), []byte("Transfer-Encoding"), []byte("Upgrade"),
		[]byte("Set-Cookie"), []byte("Content-Length"), strAge,
	}
)

// storable tells whether resp may go into a shared cache.
func storable(resp *fasthttp.Response) bool {
	if resp.StatusCode() != fasthttp.StatusOK || resp.IsBodyStream() {
		return false
	}
	cc := resp.Header.PeekBytes(strCacheControl)
	if hasToken(cc, strNoStore) || hasToken(cc, strPrivate) {
		return false
	}
	vary := resp.Header.PeekBytes(strVary)
	if len(vary) == 0 {
		return true
	}
	// Keys do not hold request headers: only a variation by encoding is
	// harmless, and only when this answer is not encoded.
	ok := true
	eachToken(vary, func(tok []byte) {
		if !bytes.EqualFold(tok, strAcceptEncoding) {
			ok = false
		}
	})
	ce := resp.Header.ContentEncoding()
	return ok && (len(ce) == 0 || bytes.EqualFold(ce, strIdentity))
}

func appendEntry(dst []byte, resp *fasthttp.Response, expires, stored int64) []byte {
	dst = append(dst, entryVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(expires))
	dst = binary.BigEndian.AppendUint64(dst, uint64(stored))
	dst = binary.BigEndian.AppendUint16(dst, uint16(resp.StatusCode()))
	countAt := len(dst)
	dst = append(dst, 0, 0)
	conn := resp.Header.PeekBytes(strConnection)
	n := 0
	for k, v := range resp.Header.All() {
		if skipHeader(k, conn) || len(k) > 0xffff || n == 0xffff {
			continue
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, k...)
		dst = append(dst, v...)
		n++
	}
	binary.BigEndian.PutUint16(dst[countAt:], uint16(n))
	return append(dst, resp.Body()...)
}

func skipHeader(name, connection []byte) bool {
	for _, h := range notStored {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return hasToken(connection, name)
}

// entry is a parsed cache entry; its slices point into the buffer parsed.
type entry struct {
	expires, stored int64
	status          int
	headers         []byte // the encoded header list
	count           int
	body            []byte
}

func parseEntry(b []byte) (e entry, ok bool) {
	if len(b) < entryHeaderSize || b[0] != entryVersion {
		return e, false
	}
	e.expires = int64(binary.BigEndian.Uint64(b[1:]))
	e.stored = int64(binary.BigEndian.Uint64(b[9:]))
	e.status = int(binary.BigEndian.Uint16(b[17:]))
	e.count = int(binary.BigEndian.Uint16(b[19:]))
	rest := b[entryHeaderSize:]
	size := 0
	for range e.count {
		if len(rest)-size < 6 {
			return e, false
		}
		kl := int(binary.BigEndian.Uint16(rest[size:]))
		vl := int(binary.BigEndian.Uint32(rest[size+2:]))
		size += 6 + kl + vl
		if size > len(rest) {
			return e, false
		}
	}
	e.headers, e.body = rest[:size], rest[size:]
	return e, true
}

// writeTo replaces dst with the entry's status, headers and body.
func (e *entry) writeTo(dst *fasthttp.Response) {
	dst.Reset()
	dst.SetStatusCode(e.status)
	h := e.headers
	for range e.count {
		kl := int(binary.BigEndian.Uint16(h))
		vl := int(binary.BigEndian.Uint32(h[2:]))
		dst.Header.AddBytesKV(h[6:6+kl], h[6+kl:6+kl+vl])
		h = h[6+kl+vl:]
	}
	dst.SetBody(e.body)
}

// hasToken tells whether the comma-separated list holds tok, ignoring case
// and any "=value" part.
func hasToken(list, tok []byte) bool {
	found := false
	eachToken(list, func(t []byte) {
		if bytes.EqualFold(t, tok) {
			found = true
		}
	})
	return found
}

// eachToken calls f with each trimmed, non-empty token of a comma-separated
// header value, cut before any '='.
func eachToken(list []byte, f func(tok []byte)) {
	for len(list) > 0 {
		var tok []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			tok, list = list[:i], list[i+1:]
		} else {
			tok, list = list, nil
		}
		if i := bytes.IndexByte(tok, '='); i >= 0 {
			tok = tok[:i]
		}
		if tok = bytes.TrimSpace(tok); len(tok) > 0 {
			f(tok)
		}
	}
}
