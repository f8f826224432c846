// Command bareproxy is the floor of the comparison benchmark: a reverse
// proxy of a few lines on the same HTTP stack as Sentinel (a fasthttp server
// whose timeouts its listener bounds as Sentinel's does, and a
// fasthttp.HostClient with keep-alive to one upstream), with no
// routing, identity, limits, adaptive layer, header hygiene or metrics.
// The gap between it and Sentinel is what Sentinel's own work costs; the gap
// between it and nginx is the HTTP stack's. With -pipeline N it sends the
// requests over at most N pipelined connections (fasthttp.PipelineClient),
// the floor of a pool with `pipeline: N`. With -stream it passes every
// answer on as it is read (Response.StreamBody) instead of reading it whole:
// the floor for answers too large to hold. With -refuse it answers every
// request 429 with a small JSON body and never calls the upstream: the floor
// of the refusal path. -pprof ADDR serves net/http/pprof on a loopback
// address, to profile the floor beside Sentinel (bench/profile.sh).
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:29380", "address to serve on")
	upstream := flag.String("upstream", "127.0.0.1:29100", "host:port of the upstream")
	refuse := flag.Bool("refuse", false, "answer every request 429 itself (the floor of the refusal path)")
	stream := flag.Bool("stream", false, "pass answers on as they are read instead of reading them whole")
	pipeline := flag.Int("pipeline", 0, "pipeline the requests over at most this many connections (0: a HostClient's connection each)")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this loopback host:port (empty: off)")
	flag.Parse()
	if *pprofAddr != "" {
		go servePprof(*pprofAddr)
	}
	client := &fasthttp.HostClient{
		Addr:                     *upstream,
		MaxConns:                 512,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		ReadBufferSize:           8 << 10,
	}
	var do func(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error = client.DoTimeout
	if *pipeline > 0 {
		do = (&fasthttp.PipelineClient{
			Addr:                     *upstream,
			MaxConns:                 *pipeline,
			DisablePathNormalizing:   true,
			NoDefaultUserAgentHeader: true,
			ReadBufferSize:           8 << 10,
		}).DoTimeout
	}
	refusal := []byte(`{"error":"rate limit exceeded"}`)
	handler := func(ctx *fasthttp.RequestCtx) {
		if *refuse {
			ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
			ctx.SetContentType("application/json")
			ctx.SetBody(refusal)
			return
		}
		ctx.Response.StreamBody = *stream
		if err := do(&ctx.Request, &ctx.Response, 10*time.Second); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}
	srv := &fasthttp.Server{
		Handler:               handler,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// Sentinel's default timeouts, bounded the way Sentinel's listeners bound
	// them.
	log.Fatal(srv.Serve(deadline.Listen(ln, "bare", deadline.Timeouts{Read: 5 * time.Second, Write: 30 * time.Second, Idle: 60 * time.Second})))
}

// servePprof serves the CPU profile on addr, on its own mux.
func servePprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Print(srv.ListenAndServe())
}
