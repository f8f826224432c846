package upstream

import (
	"crypto/tls"
	"net"
	"time"
)

// Dial connects to one of the pool's targets, picked as Do picks them (and
// in panic mode when none is usable), for a connection the caller takes
// over: an upgraded (WebSocket) connection the proxy splices to its client.
// The connection to an https target is a TLS client connection, its
// handshake done. A failed connect counts against the target as in Do;
// a made one counts as a success. host is the target's host[:port] as
// configured, for the Host header of a request that has none.
//
// The whole call is bounded by timeout. The caller closes the connection.
func (p *Pool) Dial(timeout time.Duration) (conn net.Conn, host string, err error) {
	start := time.Now()
	t, trial := p.pick(start.UnixNano(), nil)
	if t == nil {
		if t = p.panicPick(); t == nil {
			return nil, "", p.errNoTarget
		}
	}
	conn, err = t.dial(t.hc.Addr, timeout)
	if err == nil && t.hc.IsTLS {
		tc := tls.Client(conn, &tls.Config{ServerName: hostOnly(string(t.host)), MinVersion: tls.VersionTLS12})
		_ = tc.SetDeadline(start.Add(timeout))
		if err = tc.Handshake(); err != nil {
			conn.Close()
		} else {
			_ = tc.SetDeadline(time.Time{})
			conn = tc
		}
	}
	now := time.Now().UnixNano()
	if err != nil {
		t.observe(true, trial, now)
		t.m.failure.Inc()
		if _, timedOut := errorKind(err); timedOut {
			return nil, "", &TargetError{Upstream: p.name, Target: t.url, Kind: ErrTimeout, Err: err}
		}
		return nil, "", &TargetError{Upstream: p.name, Target: t.url, Err: err}
	}
	t.observe(false, trial, now)
	t.m.success.Inc()
	return conn, string(t.host), nil
}

func hostOnly(hostPort string) string {
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		return h
	}
	return hostPort
}
