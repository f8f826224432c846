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
// of the refusal path. With -headers it adds the headers Sentinel adds by
// default, as constants (X-Forwarded-For, X-Forwarded-Proto and
// X-Request-Id to the request; the five rate-limit headers, X-Request-Id and
// on a refusal Retry-After and Sentinel's JSON body to the answer): the floor of a gateway that
// writes them, whatever it decides. -pprof ADDR serves net/http/pprof on a loopback
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
	headers := flag.Bool("headers", false, "add the headers Sentinel adds by default, as constants: X-Forwarded-For, X-Forwarded-Proto and X-Request-Id to the upstream; the rate-limit headers and X-Request-Id to the client")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this loopback host:port (empty: off)")
	flag.Parse()
	if *pprofAddr != "" {
		go servePprof(*pprofAddr)
	}
	var handler fasthttp.RequestHandler
	if *refuse {
		handler = refusalHandler(*headers)
	} else {
		handler = proxyHandler(upstreamCall(*upstream, *pipeline), *stream, *headers)
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

// upstreamCall is how a request goes to the upstream: a HostClient with a
// connection per request in flight, or with pipeline > 0 a PipelineClient
// over at most that many connections.
func upstreamCall(upstream string, pipeline int) func(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	if pipeline > 0 {
		return (&fasthttp.PipelineClient{
			Addr:                     upstream,
			MaxConns:                 pipeline,
			DisablePathNormalizing:   true,
			NoDefaultUserAgentHeader: true,
			ReadBufferSize:           8 << 10,
		}).DoTimeout
	}
	return (&fasthttp.HostClient{
		Addr:                     upstream,
		MaxConns:                 512,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		ReadBufferSize:           8 << 10,
	}).DoTimeout
}

// proxyHandler passes every request to do, its answer streamed when
// stream, with Sentinel's headers both ways when headers.
func proxyHandler(do func(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error, stream, headers bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Response.StreamBody = stream
		if headers {
			h := &ctx.Request.Header
			h.SetCanonical(hXFF, vXFF)
			h.SetCanonical(hXFP, vXFP)
			h.SetCanonical(hRID, vRID)
		}
		if err := do(&ctx.Request, &ctx.Response, 10*time.Second); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
		if headers {
			setAnswerHeaders(&ctx.Response.Header, proxyValues)
		}
	}
}

// refusalHandler answers every request 429 with a small JSON body, or with
// Sentinel's body and headers when headers.
func refusalHandler(headers bool) fasthttp.RequestHandler {
	body := []byte(`{"error":"rate limit exceeded"}`)
	if headers {
		body = refusalBody
	}
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
		if headers {
			setAnswerHeaders(&ctx.Response.Header, refusalValues)
			ctx.Response.Header.SetCanonical(hRetryAfter, vRetryAfter)
		}
	}
}

// The headers of -headers, with the values Sentinel gives them on the
// benchmark's rows: what it adds to the request it forwards, and to the
// answer (proxyValues on the proxy row, refusalValues and Retry-After on
// the refusal row).
var (
	hXFF, vXFF               = []byte("X-Forwarded-For"), []byte("127.0.0.1")
	hXFP, vXFP               = []byte("X-Forwarded-Proto"), []byte("http")
	hRID, vRID               = []byte("X-Request-Id"), []byte("d259f9be-0000000000000001")
	hRetryAfter, vRetryAfter = []byte("Retry-After"), []byte("1")

	answerKeys = [...][]byte{[]byte("Ratelimit-Policy"), []byte("Ratelimit"), []byte("X-Ratelimit-Limit"),
		[]byte("X-Ratelimit-Remaining"), []byte("X-Ratelimit-Retry-After-Ms"), hRID}
	proxyValues = [len(answerKeys)][]byte{[]byte(`"tenant";q=1000000000;w=1, "api_key";q=1000000000;w=1, "ip";q=1000000000;w=1`),
		[]byte(`"tenant";r=999999999;t=1`), []byte("1000000000"), []byte("999999999"), []byte("0"), vRID}
	refusalValues = [len(answerKeys)][]byte{[]byte(`"tenant";q=99;w=1`), []byte(`"tenant";r=0;t=1`), []byte("99"),
		[]byte("0"), []byte("412"), vRID}
)

// refusalBody is the body of a refusal with -headers: Sentinel's.
var refusalBody = []byte(`{"error":"rate limit exceeded","scope":"tenant","limit":99,"retry_after_ms":412,"request_id":"d259f9be-0000000000000001"}`)

// setAnswerHeaders sets answerKeys to values. The keys are in fasthttp's
// canonical form, set without normalizing them again (as Sentinel does).
func setAnswerHeaders(h *fasthttp.ResponseHeader, values [len(answerKeys)][]byte) {
	for i, k := range answerKeys {
		h.SetCanonical(k, values[i])
	}
}

// servePprof serves the CPU profile on addr, on its own mux.
func servePprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Print(srv.ListenAndServe())
}
