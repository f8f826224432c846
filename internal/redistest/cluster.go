package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds how long the cluster may take to reach
// cluster_state:ok on every node.
const clusterTimeout = 20 * time.Second

// Cluster is a Redis Cluster of three masters and no replicas, each a
// redis-server owned by the test.
type Cluster struct {
	// Addrs are the masters' addresses, "127.0.0.1:port"; any one of them is
	// enough to bootstrap a cluster client.
	Addrs []string
	// Nodes are the masters, in the order of Addrs. Nodes[i] serves the i-th
	// third of the 16384 slots.
	Nodes []*Server

	busPorts []int // cluster bus port of each node, for CLUSTER MEET
}

// StartCluster starts three cluster-enabled redis-servers on free 127.0.0.1
// ports, splits the 16384 slots between them, joins them and waits until
// every node reports cluster_state:ok. It fails the test when that does not
// happen.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		var bus int
		s := startServer(t, func(int) []string {
			bus = freePort(t)
			return []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(bus),
				"--cluster-node-timeout", "5000",
				// The nodes that live keep serving their slots when one
				// master fails (there are no replicas to take its over).
				"--cluster-require-full-coverage", "no",
			}
		})
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
		c.busPorts = append(c.busPorts, bus)
	}
	if err := c.form(); err != nil {
		t.Fatalf("redistest: cannot form a Redis Cluster on %v: %v", c.Addrs, err)
	}
	return c
}

// form assigns the slots, gives each node its own config epoch (so that no
// epoch collision has to be resolved), introduces the nodes and waits.
func (c *Cluster) form() error {
	const slots = 16384
	n := len(c.Nodes)
	for i, s := range c.Nodes {
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if _, err := do(s.Addr, time.Second, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", s.Addr, err)
		}
		if _, err := do(s.Addr, time.Second, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", s.Addr, err)
		}
	}
	first := c.Nodes[0].Addr
	for i, s := range c.Nodes[1:] {
		host, port, _ := net.SplitHostPort(s.Addr)
		bus := strconv.Itoa(c.busPorts[i+1])
		if _, err := do(first, time.Second, "CLUSTER", "MEET", host, port, bus); err != nil {
			return fmt.Errorf("CLUSTER MEET %s from %s: %w", s.Addr, first, err)
		}
	}
	return c.waitOK()
}

func (c *Cluster) waitOK() error {
	deadline := time.Now().Add(clusterTimeout)
	for {
		var last string
		ok := true
		for _, s := range c.Nodes {
			info, err := do(s.Addr, time.Second, "CLUSTER", "INFO")
			if err != nil || !clusterReady(info, len(c.Nodes)) {
				ok, last = false, fmt.Sprintf("%s: %v %s", s.Addr, err, info)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready within %v; last: %s", clusterTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterReady reports whether a CLUSTER INFO reply shows a healthy cluster
// that knows all n nodes.
func clusterReady(info string, n int) bool {
	return strings.Contains(info, "cluster_state:ok") &&
		strings.Contains(info, "cluster_slots_assigned:16384") &&
		strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r")
}
