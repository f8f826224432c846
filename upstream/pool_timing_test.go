package upstream

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkPool sends GETs through a one-target pool from 64 goroutines to
// a real fasthttp backend on loopback, each request on a connection of its
// own (HostClient) or pipelined over one connection (pipeline: 1). The
// backend shares the machine: the figure is the whole round trip's cost.
func BenchmarkPool(b *testing.B) {
	for _, bc := range []struct {
		name     string
		pipeline int
	}{{"connection-each", 0}, {"pipeline-1", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			backend := startBackend(b)
			_, p := testPool(b, func(c *PoolConfig) { c.Pipeline = bc.pipeline }, backend.URL)
			b.SetParallelism(32) // × GOMAXPROCS goroutines
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := fasthttp.AcquireRequest()
				resp := fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for pb.Next() {
					req.SetRequestURI("/r?size=64")
					req.Header.SetHost("client.example")
					if err := p.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Errorf("status %d, %v", resp.StatusCode(), err)
						return
					}
				}
			})
		})
	}
}
