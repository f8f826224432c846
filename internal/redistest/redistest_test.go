package redistest

import (
	"strings"
	"testing"
	"time"
)

func TestStartRestartPause(t *testing.T) {
	s := Start(t)
	if _, err := do(s.Addr, time.Second, "SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Pause()
	if _, err := do(s.Addr, 200*time.Millisecond, "PING"); err == nil {
		t.Fatalf("PING answered while paused")
	}
	s.Resume()
	if got, err := do(s.Addr, time.Second, "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET after resume = %q, %v", got, err)
	}
	addr := s.Addr
	s.Stop()
	if _, err := do(addr, 200*time.Millisecond, "PING"); err == nil {
		t.Fatalf("PING answered after Stop")
	}
	s.Restart()
	if s.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr)
	}
	if got, err := do(s.Addr, time.Second, "GET", "k"); err != nil || got != "" {
		t.Fatalf("GET after restart = %q, %v; want an empty server", got, err)
	}
}

func TestStartCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs) != 3 {
		t.Fatalf("got %d nodes, want 3", len(c.Addrs))
	}
	for _, a := range c.Addrs {
		info, err := do(a, time.Second, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("%s: CLUSTER INFO = %q, %v", a, info, err)
		}
	}
}
