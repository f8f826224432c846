package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/proxy/httppath"
)

// memConn is a net.Conn that reads a fixed input and keeps what is written.
type memConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *memConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *memConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4000} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzRequestHead writes arbitrary bytes to the proxy as a client would and
// checks every request that reaches the upstream: its path is normalised,
// it carries no header with an underscore, at most one API key, and the
// Host the route was chosen by.
func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET /api/x?q=1 HTTP/1.1\r\nHost: gw\r\nX-API-Key: acme-key\r\n\r\n",
		"GET /api/../api/%7e HTTP/1.1\r\nHost: gw\r\nX_API_Key: a\r\n\r\n",
		"GET http://other/api/x HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET /API;x=1 HTTP/1.1\r\nHost: gw\r\nX-API-Key: a\r\nX-Api-Key: b\r\n\r\n",
		"CONNECT gw:443 HTTP/1.1\r\nHost: gw:443\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n",
		"POST /api HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
		"GET /api/%252e HTTP/1.1\r\nHost: gw\r\n\r\nGET /api HTTP/1.1\r\nHost: gw\r\n\r\n",
		"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
	} {
		f.Add([]byte(s))
	}
	var forwarded []string
	var problems []string
	check := func(req *fasthttp.Request) {
		uri := req.Header.RequestURI()
		path := uri
		if i := bytes.IndexByte(uri, '?'); i >= 0 {
			path = uri[:i]
		}
		if again, e := httppath.Normalize(nil, path); e != httppath.OK || !bytes.Equal(again, path) {
			problems = append(problems, "path not normalised: "+string(uri))
		}
		keys := 0
		for k := range req.Header.All() {
			if bytes.IndexByte(k, '_') >= 0 {
				problems = append(problems, "underscore header forwarded: "+string(k))
			}
			if bytes.EqualFold(k, []byte("X-API-Key")) {
				keys++
			}
		}
		if keys > 1 {
			problems = append(problems, "API key forwarded twice")
		}
		forwarded = append(forwarded, string(req.Header.Host()))
	}
	s, err := New(Deps{
		Config: provisioned(Config{Routes: []Route{
			{PathPrefix: "/api", Upstream: "api", Resource: "api", PathCaseInsensitive: true},
			{PathPrefix: "/", Host: "other", Upstream: "api", Resource: "other"},
		}}),
		Limiter: &fakeLimiter{allow: func(*limit.Request) limit.Decision { return limit.Decision{Allowed: true} }},
		Tenants: testTenants(f),
		Log:     discardLog(),
		Pools: func(string) Doer {
			return doerFunc(func(req *fasthttp.Request, resp *fasthttp.Response) error {
				check(req)
				resp.SetStatusCode(200)
				return nil
			})
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		forwarded, problems = forwarded[:0], problems[:0]
		c := &memConn{in: bytes.NewReader(head)}
		_ = s.server.ServeConn(c)
		if len(problems) > 0 {
			t.Fatalf("%q: %s", head, strings.Join(problems, "; "))
		}
		out := c.out.String()
		if strings.Contains(out, "HTTP/1.1 200") && len(forwarded) == 0 {
			t.Fatalf("%q: 200 without forwarding", head)
		}
	})
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
