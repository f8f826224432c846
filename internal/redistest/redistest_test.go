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

// A replicated cluster fails over: its replica serves a killed master's
// slots, with the data it had replicated.
func TestStartReplicatedCluster(t *testing.T) {
	c := StartReplicatedCluster(t)
	if len(c.Masters) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("got %d masters and %d replicas, want 3 and 3", len(c.Masters), len(c.Replicas))
	}
	// Key "a" hashes to slot 15495, served by the third master.
	// WAIT waits for the writes of its own connection: the SET goes on it.
	replies, err := doAll(c.Masters[2].Addr, 6*time.Second, []string{"SET", "a", "1"}, []string{"WAIT", "1", "5000"})
	if err != nil || replies[1] != "1" {
		t.Fatalf("SET and WAIT for the replica on the third master = %q, %v", replies, err)
	}
	start := time.Now()
	deadline := start.Add(15 * time.Second)
	c.Masters[2].Stop()
	for {
		info, err := do(c.Replicas[2].Addr, time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info, "role:master") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica was not promoted: %q, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica promoted %v after its master was killed", time.Since(start).Round(time.Millisecond))
	if got, err := do(c.Replicas[2].Addr, time.Second, "GET", "a"); err != nil || got != "1" {
		t.Fatalf("GET a on the promoted replica = %q, %v; want 1", got, err)
	}
}
