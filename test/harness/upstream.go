package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Upstream is a real HTTP backend on a free loopback port, stopped when the
// test ends. By default it answers every path at once with 200 and
// {"path":"/the/path"}, and /healthz with 200 without counting it. A test
// steers it while it serves: the status of its answers (SetStatus), the
// time a request under /slow/ takes (SetSlow), a fixed number of workers
// that each request holds for a service time (UpstreamOptions.Workers,
// SetService: a backend whose queue grows with concurrency), and handlers
// of its own for some paths (Handle).
type Upstream struct {
	URL string

	mux      *http.ServeMux
	status   atomic.Int32
	slow     atomic.Int64 // nanoseconds a /slow/ request takes
	service  atomic.Int64 // nanoseconds a worker is held
	workers  chan struct{}
	inflight atomic.Int64
	hits     atomic.Int64

	mu       sync.Mutex
	arrivals []arrival
}

type arrival struct {
	at  time.Time
	key string
}

// UpstreamOptions change how StartUpstream builds an upstream.
type UpstreamOptions struct {
	// Workers > 0: every request first waits for one of that many workers
	// and holds it for the service time (SetService).
	Workers int
}

// StartUpstream starts an upstream with the default behaviour.
func StartUpstream(t testing.TB) *Upstream {
	t.Helper()
	return StartUpstreamWith(t, UpstreamOptions{})
}

// StartUpstreamWith starts an upstream with options.
func StartUpstreamWith(t testing.TB, o UpstreamOptions) *Upstream {
	t.Helper()
	u := &Upstream{mux: http.NewServeMux()}
	u.status.Store(http.StatusOK)
	if o.Workers > 0 {
		u.workers = make(chan struct{}, o.Workers)
	}
	u.mux.HandleFunc("/", u.serve)
	u.mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: u.mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	u.URL = "http://" + ln.Addr().String()
	return u
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	u.mu.Lock()
	u.arrivals = append(u.arrivals, arrival{at: time.Now(), key: r.Header.Get("X-API-Key")})
	u.mu.Unlock()
	u.inflight.Add(1)
	defer u.inflight.Add(-1)
	_, _ = io.Copy(io.Discard, r.Body)
	if u.workers != nil {
		u.workers <- struct{}{}
		time.Sleep(time.Duration(u.service.Load()))
		<-u.workers
	}
	if strings.HasPrefix(r.URL.Path, "/slow/") {
		time.Sleep(time.Duration(u.slow.Load()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(u.status.Load()))
	fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
}

// Handle serves pattern (http.ServeMux's) with h instead of the default
// answer; requests to it are not counted.
func (u *Upstream) Handle(pattern string, h http.HandlerFunc) { u.mux.HandleFunc(pattern, h) }

// SetStatus sets the status of the default answer from now on.
func (u *Upstream) SetStatus(code int) { u.status.Store(int32(code)) }

// SetSlow sets how long a request under /slow/ takes from now on.
func (u *Upstream) SetSlow(d time.Duration) { u.slow.Store(int64(d)) }

// SetService sets how long a request holds its worker (with Workers).
func (u *Upstream) SetService(d time.Duration) { u.service.Store(int64(d)) }

// Hits counts the requests that reached the default answer.
func (u *Upstream) Hits() int64 { return u.hits.Load() }

// InFlight counts the requests being answered now.
func (u *Upstream) InFlight() int64 { return u.inflight.Load() }

// Arrivals returns the arrival times of the requests that carried the API
// key key (X-API-Key).
func (u *Upstream) Arrivals(key string) []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []time.Time
	for _, a := range u.arrivals {
		if a.key == key {
			out = append(out, a.at)
		}
	}
	return out
}
