package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replicaNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: how long a master may be unreachable before its replica is
// promoted (a failover takes about twice that).
const replicaNodeTimeout = 1000

// ReplicatedCluster is a Redis Cluster of three masters with one replica
// each: killing Masters[i] (Stop) makes Replicas[i] take its slots over
// after about two node timeouts, with whatever it had replicated by then.
type ReplicatedCluster struct {
	// Addrs are the masters' addresses (enough to bootstrap a client).
	Addrs    []string
	Masters  []*Server
	Replicas []*Server
}

// StartReplicatedCluster starts six cluster-enabled redis-servers on free
// 127.0.0.1 ports, splits the slots between the first three, makes each of
// the others the replica of one and waits until every node reports
// cluster_state:ok and every replica's link to its master is up.
func StartReplicatedCluster(t testing.TB) *ReplicatedCluster {
	t.Helper()
	c := &ReplicatedCluster{}
	var nodes []*Server
	var buses []int
	for i := range 6 {
		var bus int
		s := startServer(t, func(int) []string {
			bus = freePort(t)
			return []string{
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-port", strconv.Itoa(bus),
				"--cluster-node-timeout", strconv.Itoa(replicaNodeTimeout),
				"--cluster-require-full-coverage", "no",
			}
		})
		nodes, buses = append(nodes, s), append(buses, bus)
		if i < 3 {
			c.Masters, c.Addrs = append(c.Masters, s), append(c.Addrs, s.Addr)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if err := c.form(nodes, buses); err != nil {
		t.Fatalf("redistest: cannot form a replicated Redis Cluster: %v", err)
	}
	return c
}

func (c *ReplicatedCluster) form(nodes []*Server, buses []int) error {
	masters := &Cluster{Nodes: c.Masters, Addrs: c.Addrs, busPorts: buses[:3]}
	if err := masters.form(); err != nil {
		return err
	}
	for i, s := range c.Replicas {
		host, port, _ := net.SplitHostPort(s.Addr)
		if _, err := do(c.Addrs[0], time.Second, "CLUSTER", "MEET", host, port, strconv.Itoa(buses[3+i])); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr, err)
		}
	}
	deadline := time.Now().Add(clusterTimeout)
	for i, s := range c.Replicas {
		id, err := do(c.Masters[i].Addr, time.Second, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", c.Masters[i].Addr, err)
		}
		// The replica must know its master before it can follow it.
		for {
			if _, err = do(s.Addr, time.Second, "CLUSTER", "REPLICATE", id); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CLUSTER REPLICATE %s on %s: %w", id, s.Addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return waitReplicated(nodes, c.Replicas, deadline)
}

// waitReplicated waits until every node sees a healthy cluster of all
// nodes and every replica's link to its master is up.
func waitReplicated(nodes, replicas []*Server, deadline time.Time) error {
	for {
		last := ""
		for _, s := range nodes {
			if info, err := do(s.Addr, time.Second, "CLUSTER", "INFO"); err != nil || !clusterReady(info, len(nodes)) {
				last = fmt.Sprintf("%s: %v %s", s.Addr, err, info)
				break
			}
		}
		for _, s := range replicas {
			if info, err := do(s.Addr, time.Second, "INFO", "replication"); last == "" && (err != nil || !strings.Contains(info, "master_link_status:up")) {
				last = fmt.Sprintf("%s: %v %s", s.Addr, err, info)
			}
		}
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v; last: %s", clusterTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
