package deadline

import (
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkServer is a fasthttp server and client on loopback, 64
// connections, a 5-byte answer: with the server's own timeouts (socket
// deadlines on every request) against the same timeouts kept by a Listener.
func BenchmarkServer(b *testing.B) {
	tm := Timeouts{Read: 5 * time.Second, Write: 30 * time.Second, Idle: time.Minute}
	for _, mode := range []string{"socket-deadlines", "listener"} {
		b.Run(mode, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &fasthttp.Server{Handler: hello}
			served := ln
			if mode == "listener" {
				served = Listen(ln, "bench", tm)
			} else {
				srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = tm.Read, tm.Write, tm.Idle
			}
			go func() { _ = srv.Serve(served) }()
			defer func() { _ = srv.Shutdown() }()
			client := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 64}
			requests(b, "http://"+ln.Addr().String()+"/", client.Do)
		})
	}
}

// BenchmarkClient is the same loopback pair from the client's side: a
// HostClient whose every request has a deadline (a write and a read deadline
// on its connection), with socket deadlines against a Sweeper's.
func BenchmarkClient(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: hello}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	for _, mode := range []string{"socket-deadlines", "sweeper"} {
		b.Run(mode, func(b *testing.B) {
			client := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 64}
			if mode == "sweeper" {
				s := NewSweeper(100 * time.Millisecond)
				client.DialTimeout = func(addr string, timeout time.Duration) (net.Conn, error) {
					c, err := fasthttp.DialTimeout(addr, timeout)
					if err != nil {
						return nil, err
					}
					return s.Wrap(c), nil
				}
			}
			defer client.CloseIdleConnections()
			requests(b, "http://"+ln.Addr().String()+"/", func(req *fasthttp.Request, resp *fasthttp.Response) error {
				return client.DoTimeout(req, resp, time.Second)
			})
		})
	}
}

// requests sends GETs of url with do from 64 goroutines (2 cores × 32)
// until b.N are answered.
func requests(b *testing.B, url string, do func(*fasthttp.Request, *fasthttp.Response) error) {
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url)
		for pb.Next() {
			if err := do(req, resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
