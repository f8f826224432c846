package reply

import (
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

var contentTypeJSON = []byte("application/json")

// Problem is the JSON body of an error answer, the same on the proxy and the
// admin listener: {"error":"field: msg","field":"field","request_id":"id"}.
// Without a Field, error is Msg alone and field is left out; without a
// RequestID (nil), request_id is left out.
type Problem struct {
	// Msg says what is wrong, in words a client can act on.
	Msg string
	// Field names the input the answer is about ("tokens_requested",
	// "body"); "" for none.
	Field string
	// RequestID is the request's ID (the proxy's answers carry one).
	RequestID []byte
}

// AppendJSON appends p as one line of JSON.
func (p Problem) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":"`...)
	if p.Field != "" {
		dst = appendEscaped(dst, p.Field)
		dst = append(dst, ": "...)
	}
	dst = appendEscaped(dst, p.Msg)
	dst = append(dst, '"')
	if p.Field != "" {
		dst = append(dst, `,"field":`...)
		dst = AppendJSONString(dst, p.Field)
	}
	if p.RequestID != nil {
		dst = append(dst, `,"request_id":`...)
		dst = AppendJSONString(dst, p.RequestID)
	}
	return append(dst, "}\n"...)
}

// Write answers status with p as a JSON body built in buf[:0], and returns
// the buffer for reuse. With a buffer large enough it allocates nothing: the
// response copies the body.
func (p Problem) Write(ctx *fasthttp.RequestCtx, status int, buf []byte) []byte {
	buf = p.AppendJSON(buf[:0])
	ctx.Response.Header.SetContentTypeBytes(contentTypeJSON)
	ctx.SetStatusCode(status)
	ctx.Response.SetBody(buf)
	return buf
}

// AppendJSONString appends s as a JSON string. Quotes and backslashes are
// escaped, control characters become spaces and invalid UTF-8 becomes
// U+FFFD, so that any input gives valid JSON. It allocates nothing beyond
// growing dst.
func AppendJSONString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

func appendEscaped[T string | []byte](dst []byte, s T) []byte {
	// Fast path: the bytes before the first one that needs care go in as
	// they are, in one copy (a request ID or a message: all of them).
	safe := 0
	for safe < len(s) && s[safe] >= 0x20 && s[safe] < utf8.RuneSelf && s[safe] != '"' && s[safe] != '\\' {
		safe++
	}
	dst = append(dst, s[:safe]...)
	for i := safe; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, ' ')
		case c >= utf8.RuneSelf:
			// Copy at most one rune's bytes so that one DecodeRune serves
			// both string and []byte without converting (and allocating).
			var rb [utf8.UTFMax]byte
			r, size := utf8.DecodeRune(rb[:copy(rb[:], s[i:])])
			if r == utf8.RuneError && size <= 1 {
				dst = append(dst, `\ufffd`...)
				i++
				continue
			}
			dst = append(dst, s[i:i+size]...)
			i += size
			continue
		default:
			dst = append(dst, c)
		}
		i++
	}
	return dst
}
