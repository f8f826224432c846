package redistest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is the server's address, "127.0.0.1:port". It stays the same across
	// Restart.
	Addr string

	t     testing.TB
	dir   string
	port  int
	extra []string // extra command-line arguments (cluster mode)

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// Start starts a redis-server on a free 127.0.0.1 port with persistence off,
// waits until it answers PING and registers t.Cleanup to kill it. It fails
// the test when redis-server is missing or does not start.
func Start(t testing.TB) *Server {
	t.Helper()
	return startServer(t, nil)
}

func startServer(t testing.TB, extra func(port int) []string) *Server {
	t.Helper()
	bin := serverBinary(t)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port may be taken between probe and bind
		port := freePort(t)
		s := &Server{
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			t:    t,
			dir:  t.TempDir(),
			port: port,
		}
		if extra != nil {
			s.extra = extra(port)
		}
		if lastErr = s.start(bin); lastErr == nil {
			t.Cleanup(s.kill)
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v", lastErr)
	return nil
}

// serverBinary finds redis-server on PATH or at /usr/bin/redis-server.
func serverBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	t.Fatalf("redistest: redis-server not found: install it with apt-get install redis-server")
	return ""
}

// freePort asks the kernel for a free loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: cannot find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--protected-mode", "no",
	}
	return append(args, s.extra...)
}

// start runs the process and waits for PING; on failure it kills the process
// and returns an error carrying its output.
func (s *Server) start(bin string) error {
	out := &syncBuffer{}
	cmd := exec.Command(bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.out, s.exited = cmd, out, exited
	s.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, out.String())
		default:
		}
		if reply, err := do(s.Addr, 200*time.Millisecond, "PING"); err == nil && reply == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %s", s.Addr, startTimeout, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill stops the process (even a paused one) and waits for it to exit.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Stop kills the server. Clients see connection errors until Restart.
func (s *Server) Stop() { s.kill() }

// Restart stops the server if it runs and starts a fresh, empty one on the
// same port. It fails the test if the server does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	var err error
	for attempt := 0; attempt < 20; attempt++ { // the old socket may linger briefly
		if err = s.start(serverBinary(s.t)); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: cannot restart redis-server: %v", err)
}

// Pause freezes the server process with SIGSTOP: connections stay open but
// nothing is answered, as with a Redis stuck in a slow command.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.t.Fatalf("redistest: redis-server on %s is not running", s.Addr)
		return
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: cannot send %v to redis-server on %s: %v", sig, s.Addr, err)
	}
}

// syncBuffer collects the process output; exec writes to it from another
// goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
