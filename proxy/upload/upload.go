// Package upload passes a client's streamed request body on to the
// upstream and tells the client's failures from the upstream's: a body
// that grows past its limit, arrives too slowly, or breaks fails the
// upload with an *upstream.ClientBodyError, so that the pool counts nothing
// against the target, and the Reader keeps the cause for the proxy's
// answer.
package upload

import (
	"errors"
	"io"
	"time"

	"github.com/sentinel-gateway/sentinel/upstream"
)

// ErrTooLarge is a body over its limit (server.max_request_body).
var ErrTooLarge = errors.New("proxy: request body larger than server.max_request_body")

var errTooSlow = timeoutError{}

// timeoutError is a body that did not arrive within the pool's timeout; it
// is a timeout (net.Error), which the proxy answers 408.
type timeoutError struct{}

func (timeoutError) Error() string {
	return "proxy: request body not received within the upstream timeout"
}
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return false }

// Reader passes a streamed request body through, until it grows past the
// limit or the client fails to deliver it. A body still arriving when the
// pool's timeout has passed is the client's fault too: a trickling upload
// must not read as an upstream timeout.
//
// Its zero value reads nothing; Reset readies it. It lives in the proxy's
// pooled per-request state, so that a forwarded body allocates nothing.
type Reader struct {
	pre      []byte // read before the stream
	r        io.Reader
	left     int64
	deadline int64 // unix nanos; 0: none
	fault    error
}

// Reset makes b read pre, then r, failing once the two together pass
// limit bytes or once timeout (0: none) has passed from now.
func (b *Reader) Reset(pre []byte, r io.Reader, limit int64, timeout time.Duration) {
	*b = Reader{pre: pre, r: r, left: limit - int64(len(pre))}
	if timeout > 0 {
		b.deadline = time.Now().Add(timeout).UnixNano()
	}
}

// Fault is why the client's body failed: ErrTooLarge, a timeout (a
// net.Error) or the stream's error; nil when it did not fail.
func (b *Reader) Fault() error { return b.fault }

func (b *Reader) Read(p []byte) (int, error) {
	if b.fault != nil {
		return 0, &upstream.ClientBodyError{Err: b.fault}
	}
	if len(b.pre) > 0 {
		n := copy(p, b.pre)
		b.pre = b.pre[n:]
		return n, nil
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left < 0:
		b.fault = ErrTooLarge
	case b.deadline != 0 && time.Now().UnixNano() > b.deadline:
		b.fault = errTooSlow
	case err != nil && err != io.EOF:
		b.fault = err
	default:
		return n, err
	}
	return 0, &upstream.ClientBodyError{Err: b.fault}
}
