package upstream

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
)

// WholeAnswerMax is the largest answer body a streaming caller gets read
// whole: an answer whose Content-Length is at most this is read into
// resp's body before Do returns, and a larger one, or one of unknown
// length (chunked, or until the connection closes), is streamed. Streaming
// costs fasthttp about four allocations and a copy through the server's
// stream writer per answer, which shows on small answers and not on large
// ones; reading whole holds the body for the request's life, at most this
// much per request in flight. No setting changes it: above it an answer's
// transfer outweighs the streaming cost, and a larger bound only holds
// more memory per request.
const WholeAnswerMax = 64 << 10

// maxInterim bounds the interim (1xx) answers skipped before the final one,
// as fasthttp does.
const maxInterim = 100

var errTooManyInterim = errors.New("upstream: too many interim (1xx) answers")

// poolConn is a HostClient's pooled connection. fasthttp does not export
// its type; transport's type parameter is inferred from
// HostClient.AcquireConn.
type poolConn interface{ Conn() net.Conn }

// transport is a target's HostClient's RoundTripper: fasthttp's default
// transport, with two changes for a caller that streams (resp.StreamBody):
//
//   - The choice to stream is made after the answer's head, by its length
//     (WholeAnswerMax), where fasthttp makes it before the request.
//   - The reads of the body, whole or streamed, are bounded by the pool's
//     body_idle_timeout and body_timeout (deadline.Body), not by the pool
//     timeout, which ends with the head: a small answer that trickles in
//     arrives whole as a streamed one does, and one cut is counted as cut.
//
// A caller that does not stream gets fasthttp's default transport. The
// HostClient's ReadTimeout, WriteTimeout and MaxConnDuration are not read:
// the target's client sets none (the request's deadline and the body
// bounds do their work).
type transport[C poolConn] struct {
	hc             *fasthttp.HostClient
	acquire        func(timeout time.Duration, connectionClose bool) (C, error)
	release, close func(C) // hc.ReleaseConn and hc.CloseConn, bound once
	// The pool's bounds: timeout (the head's), body_idle_timeout,
	// body_timeout (0: none), and the target's count of cut answers.
	timeout, bodyIdle, bodyTimeout time.Duration
	onCut                          func(idle bool)
	streams                        sync.Pool // *answerStream[C]
}

// newTransport is t's transport over hc, whose connection calls it takes
// as method values (they fix the connection type C).
func newTransport[C poolConn](t *target, hc *fasthttp.HostClient, cfg *PoolConfig,
	acquire func(time.Duration, bool) (C, error), release, close func(C)) *transport[C] {
	return &transport[C]{hc: hc, acquire: acquire, release: release, close: close,
		timeout: cfg.Timeout, bodyIdle: cfg.BodyIdleTimeout, bodyTimeout: cfg.BodyTimeout, onCut: t.onBodyCut}
}

// RoundTrip sends req on a pooled connection and reads the answer's head,
// then its body: none (HEAD, 1xx, 204, 304), whole, or streamed. Its
// results are fasthttp's: retry says that req may be sent again (it failed
// before the answer's head).
func (tr *transport[C]) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	if !resp.StreamBody {
		return fasthttp.DefaultTransport.RoundTrip(hc, req, resp)
	}
	timeout := req.GetTimeOut()
	var end time.Time
	if timeout > 0 {
		end = time.Now().Add(timeout)
	}
	cc, err := tr.acquire(timeout, req.ConnectionClose())
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	resp.ParseNetConn(conn)
	a := aborterOf(req)
	if err = tr.send(conn, req, end); err != nil {
		tr.close(cc)
		gone := a.gone(err)
		return gone == err, gone // an aborted forward is not sent again
	}
	a.awaiting(conn) // from here an Abort ends the wait for the head
	br := hc.AcquireReader(conn)
	err = readHead(br, req, resp)
	a.awaiting(nil)
	if err != nil {
		hc.ReleaseReader(br)
		tr.close(cc)
		gone := a.gone(err)
		return gone == err, gone
	}
	tr.boundBody(conn, end)
	return false, tr.readBody(cc, br, req, resp)
}

// send writes req on conn by the deadline end, and sets end as the
// deadline of the answer's head.
func (tr *transport[C]) send(conn net.Conn, req *fasthttp.Request, end time.Time) error {
	if err := conn.SetWriteDeadline(end); err != nil {
		return err
	}
	bw := tr.hc.AcquireWriter(conn)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	tr.hc.ReleaseWriter(bw)
	if to, ok := err.(interface{ Timeout() bool }); ok && to.Timeout() {
		return fasthttp.ErrTimeout
	}
	if err != nil {
		return err
	}
	return conn.SetReadDeadline(end)
}

// readHead reads the answer's head, past any interim (1xx) answers.
func readHead(br *bufio.Reader, req *fasthttp.Request, resp *fasthttp.Response) error {
	if req.Header.IsHead() {
		resp.SkipBody = true
	}
	if err := resp.Header.Read(br); err != nil {
		return err
	}
	for n := 0; ; n++ {
		if s := resp.StatusCode(); s < 100 || s > 199 || s == fasthttp.StatusSwitchingProtocols {
			return nil
		}
		if n >= maxInterim {
			return errTooManyInterim
		}
		if err := resp.Header.Read(br); err != nil {
			return err
		}
	}
}

// boundBody puts the reads after the head, on conn, under body_idle_timeout
// and body_timeout (from the request's start: its deadline end less the
// pool timeout) instead of the head's deadline.
func (tr *transport[C]) boundBody(conn net.Conn, end time.Time) {
	lim := deadline.BodyLimits{Idle: tr.bodyIdle, OnCut: tr.onCut}
	if tr.bodyTimeout > 0 && !end.IsZero() {
		lim.End = end.Add(tr.bodyTimeout - tr.timeout)
	}
	deadline.Body(conn.LocalAddr(), lim)
}

// readBody reads the answer's body, if it has one, whole or as a stream
// (which gives cc back when it is closed); otherwise cc goes back to the
// pool, or is closed when either side asked to or the body failed.
func (tr *transport[C]) readBody(cc C, br *bufio.Reader, req *fasthttp.Request, resp *fasthttp.Response) error {
	closeConn := req.ConnectionClose() || resp.ConnectionClose()
	n := resp.Header.ContentLength()
	var err error
	switch s := resp.StatusCode(); {
	case resp.SkipBody || s < 200 || s == fasthttp.StatusNoContent || s == fasthttp.StatusNotModified:
	case n >= 0 && n <= WholeAnswerMax:
		resp.StreamBody = false
		err = resp.ReadBody(br, WholeAnswerMax)
		resp.StreamBody = true
		closeConn = closeConn || err != nil
	default:
		tr.stream(cc, br, resp, n, closeConn)
		return nil
	}
	tr.hc.ReleaseReader(br)
	if closeConn {
		tr.close(cc)
	} else {
		tr.release(cc)
	}
	return err
}

// stream sets resp's body to an answerStream of the n bytes (-1: chunked,
// -2: until the connection closes) that follow in br.
func (tr *transport[C]) stream(cc C, br *bufio.Reader, resp *fasthttp.Response, n int, closeConn bool) {
	s, _ := tr.streams.Get().(*answerStream[C])
	if s == nil {
		s = &answerStream[C]{tr: tr}
	}
	s.cc, s.br, s.closeConn = cc, br, closeConn || n < -1
	// fasthttp reads the framing (a length, chunks) in a stream it makes
	// for a Response; replacing resp's own would release it, so a pooled
	// Response holds it.
	s.framing = fasthttp.AcquireResponse()
	s.framing.StreamBody = true
	s.framing.Header.SetContentLength(n)
	_ = s.framing.ReadBody(br, 0) // with StreamBody, only sets up the stream
	s.body = s.framing.BodyStream()
	// An answer read until the connection closes goes on chunked, as the
	// fasthttp server would send it.
	resp.SetBodyStream(s, max(n, -1))
}

// answerStream is a streamed answer body. Closing it (the fasthttp server
// does, on the goroutine that read it, once the answer is written) gives
// its connection back to the pool when the body was read to its end, and
// closes it otherwise. It is pooled by its transport.
type answerStream[C poolConn] struct {
	tr        *transport[C]
	cc        C
	br        *bufio.Reader
	framing   *fasthttp.Response
	body      io.Reader
	closeConn bool
	eof       bool
	tap       Tap // nil: none
}

func (s *answerStream[C]) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 && s.tap != nil {
		_, _ = s.tap.Write(p[:n])
	}
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

func (s *answerStream[C]) setTap(t Tap) { s.tap = t }

// Tap sees a streamed answer's body as the server passes it on: Write
// gets each piece read (it must not keep p, nor fail the stream: its
// error is ignored), and End is called once, when the stream is closed:
// whole says the body was read to its end and written to the client.
type Tap interface {
	io.Writer
	End(whole bool)
}

// SetTap makes tap see resp's body, which must be a stream the pool
// made for it (an answer of unknown length or longer than
// WholeAnswerMax); it reports whether it was.
func SetTap(resp *fasthttp.Response, tap Tap) bool {
	s, ok := resp.BodyStream().(interface{ setTap(Tap) })
	if ok {
		s.setTap(tap)
	}
	return ok
}

// CloseWithError ends the stream; err is the reader's (the server's write
// error), nil when the body was passed on.
func (s *answerStream[C]) CloseWithError(err error) error {
	tr := s.tr
	if s.tap != nil {
		s.tap.End(err == nil && s.eof)
	}
	fasthttp.ReleaseResponse(s.framing) // releases fasthttp's stream
	tr.hc.ReleaseReader(s.br)
	if err != nil || !s.eof || s.closeConn {
		tr.close(s.cc)
	} else {
		tr.release(s.cc)
	}
	*s = answerStream[C]{tr: tr}
	tr.streams.Put(s)
	return nil
}
