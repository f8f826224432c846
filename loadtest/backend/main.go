// Command demo-backend is the demo upstream of `make run`, the tests and the
// load tests (see package demobackend for what it serves). On top of it, it
// serves the quick start's model call, POST /v1/chat/completions, whose
// usage is known only at the end (chat.go), and POST /login (login.go).
package main

import (
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/loadtest/demobackend"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	latency := flag.Duration("latency", 0, "service time of one request")
	slots := flag.Int("slots", 0, "workers (0: unlimited); with -latency this is the capacity model")
	thrash := flag.Float64("thrash", 2, "queue length, in multiples of -slots, past which the backend thrashes")
	queueTimeout := flag.Duration("queue-timeout", time.Second, "longest wait for a worker before 503")
	shedDepth := flag.Int("shed-depth", 0, "answer 503 at once while more than this many requests wait for a worker (0: queue until -queue-timeout)")
	retryAfter := flag.Int("retry-after", 0, "seconds of Retry-After on the 503s of -shed-depth (0: no header)")
	fixedBody := flag.Int("fixed-body", 0, "answer every request 200 with this many bytes and nothing else (0: off; the benchmark upstream)")
	duration := flag.Duration("duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	flag.Parse()
	if *fixedBody < 0 {
		log.Fatalf("demo-backend: -fixed-body: want 0 or more bytes, got %d", *fixedBody)
	}

	b := demobackend.New(demobackend.Options{Latency: *latency, Slots: *slots, Thrash: *thrash, QueueTimeout: *queueTimeout,
		ShedDepth: *shedDepth, RetryAfter: *retryAfter, FixedBody: *fixedBody})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("demo-backend: %v", err)
	}
	handler := b.Handler
	if *fixedBody == 0 { // the fixed-response mode answers every path the same
		handler = withDemoAPIs(b.Handler)
	}
	srv := &fasthttp.Server{Handler: handler, Name: "demo-backend", Concurrency: 1 << 20}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		var stop <-chan time.Time
		if *duration > 0 {
			stop = time.After(*duration)
		}
		select {
		case <-sig:
		case <-stop:
		}
		_ = srv.Shutdown()
	}()
	if *fixedBody > 0 {
		log.Printf("demo-backend on %s (fixed response: %d bytes)", ln.Addr(), *fixedBody)
	} else {
		log.Printf("demo-backend on %s (latency %v, slots %d)", ln.Addr(), *latency, *slots)
	}
	if err := srv.Serve(ln); err != nil {
		log.Fatalf("demo-backend: %v", err)
	}
}
