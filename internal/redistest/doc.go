// Package redistest starts real redis-server processes for tests: a single
// node (Start), a three-master Redis Cluster (StartCluster) or one whose
// masters each have a replica that takes over when it dies
// (StartReplicatedCluster), each on free
// 127.0.0.1 ports, with persistence off and a temporary directory, stopped by
// t.Cleanup.
//
// It never skips: when redis-server is missing or cannot start, the test
// fails with a message that says how to fix it. Other packages' tests use it
// too, so its API stays small: Server{Addr, Stop, Restart, Pause, Resume} and
// Cluster{Addrs} and ReplicatedCluster{Addrs, Masters, Replicas}.
package redistest
