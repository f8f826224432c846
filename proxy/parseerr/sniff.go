package parseerr

import (
	"errors"
	"net"
)

// A TLS client on the plain-HTTP port is told from its first bytes, not from
// whatever fasthttp makes of a ClientHello (which depends on whether its
// random bytes hold a newline): a handshake record starts with 0x16 (type)
// and 0x03 (TLS 1.x).

// errTLSOnPlain ends a connection that opened with a TLS handshake; Log and
// Answer recognise its text (isTLSHandshake).
var errTLSOnPlain = errors.New(tlsOnPlainText)

const tlsOnPlainText = "TLS handshake on a plain-HTTP port"

// Sniff wraps the proxy's plain-HTTP listener so that each connection
// checks its first bytes: a connection that opens with a TLS handshake is
// counted and its first read fails.
func Sniff(ln net.Listener) net.Listener { return sniffListener{ln} }

type sniffListener struct{ net.Listener }

func (l sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c}, nil
}

// sniffConn refuses a connection whose first read is a TLS handshake.
type sniffConn struct {
	net.Conn
	seen bool
}

// Inner is the connection sniffConn reads from.
func (c *sniffConn) Inner() net.Conn { return c.Conn }

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.seen && n > 0 {
		c.seen = true
		if n >= 2 && p[0] == 0x16 && p[1] == 0x03 {
			parseErrTLS.Inc()
			return 0, errTLSOnPlain
		}
	}
	return n, err
}
