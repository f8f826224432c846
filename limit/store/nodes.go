package store

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// maxStoreNodes bounds the store breakers of a limiter: one per store node
// (a Redis Cluster's masters), and the node label values of the metrics.
// Nodes past it share the last breaker.
const MaxNodes = 32

// nodeMap is a Store whose keys live on several nodes (a Redis Cluster): the
// limiter keeps one breaker per node, so that a failed node sends only the
// keys of its slots to the failure policy while the others keep their exact
// decisions. Both methods are called on the request path: O(1), no locks
// held for long, no allocation.
type NodeMap interface {
	// nodeOf returns the index (0..maxStoreNodes-1) of the node that holds
	// key.
	NodeOf(key []byte) int
	// nodeName names the node of index i ("" when no node has it).
	NodeName(i int) string
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// slotMapMaxAge is how old a cluster's slot map may get before a lookup
// reads it again (in the background): slots move rarely, and a key whose
// node is wrong for that long is only decided under another node's breaker.
const slotMapMaxAge = 2 * time.Second

// slotMap says which node serves each slot, as read with CLUSTER SLOTS.
type slotMap struct {
	at   time.Time
	node [clusterSlots]uint8 // index into storeNodes.names
}

// storeNodes names the nodes of a RedisStore and maps keys to them.
type storeNodes struct {
	client  rueidis.Client
	cluster bool

	mu    sync.Mutex // guards names' growth
	names atomic.Pointer[[]string]
	slots atomic.Pointer[slotMap]
	busy  atomic.Bool // a read of the slot map is running
}

func newStoreNodes(client rueidis.Client) *storeNodes {
	n := &storeNodes{client: client, cluster: client.Mode() == rueidis.ClientModeCluster}
	names := []string{}
	if !n.cluster {
		for addr := range client.Nodes() {
			names = append(names, addr)
		}
	}
	n.names.Store(&names)
	if n.cluster {
		n.refresh()
	}
	return n
}

// nodeOf implements nodeMap.
func (n *storeNodes) NodeOf(key []byte) int {
	i, _ := n.lookup(key)
	return i
}

// lookup returns the index of key's node and whether the slot map said so
// (false, with 0, while a cluster's map has not been read).
func (n *storeNodes) lookup(key []byte) (int, bool) {
	if !n.cluster {
		return 0, true
	}
	m := n.slots.Load()
	if m == nil || time.Since(m.at) > slotMapMaxAge {
		if n.busy.CompareAndSwap(false, true) {
			go func() {
				defer n.busy.Store(false)
				n.refresh()
			}()
		}
		if m == nil {
			return 0, false
		}
	}
	return int(m.node[hashSlot(key)]), true
}

// nodeName implements nodeMap.
func (n *storeNodes) NodeName(i int) string {
	names := *n.names.Load()
	if i < len(names) {
		return names[i]
	}
	return ""
}

// index returns the index of a node's address, adding it when new.
func (n *storeNodes) index(addr string) uint8 {
	names := *n.names.Load()
	for i, a := range names {
		if a == addr {
			return uint8(i)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	names = *n.names.Load()
	for i, a := range names {
		if a == addr {
			return uint8(i)
		}
	}
	if len(names) >= MaxNodes {
		return MaxNodes - 1
	}
	grown := append(names[:len(names):len(names)], addr)
	n.names.Store(&grown)
	return uint8(len(grown) - 1)
}

// refresh reads the slot map from the first node that answers CLUSTER
// SLOTS. A failed node still owns its slots there (no replica took them
// over), so its keys keep going to its breaker.
func (n *storeNodes) refresh() {
	for _, c := range n.client.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ranges, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err != nil {
			continue
		}
		m := &slotMap{at: time.Now()}
		for _, r := range ranges {
			n.readRange(m, r)
		}
		n.slots.Store(m)
		return
	}
}

// readRange maps one CLUSTER SLOTS entry, {start, end, {host, port, ...},
// replicas...}, to its master.
func (n *storeNodes) readRange(m *slotMap, r rueidis.RedisMessage) {
	parts, err := r.ToArray()
	if err != nil || len(parts) < 3 {
		return
	}
	start, err1 := parts[0].AsInt64()
	end, err2 := parts[1].AsInt64()
	master, err3 := parts[2].ToArray()
	if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || start < 0 || end >= clusterSlots {
		return
	}
	host, err1 := master[0].ToString()
	port, err2 := master[1].AsInt64()
	if err1 != nil || err2 != nil {
		return
	}
	i := n.index(host + ":" + strconv.FormatInt(port, 10))
	for s := start; s <= end; s++ {
		m.node[s] = i
	}
}

// hashSlot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash tag,
// the part between the first '{' and the next '}' when that is not empty,
// else of the whole key, modulo 16384.
func hashSlot(key []byte) uint16 {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return crc16(key) % clusterSlots
			}
		}
		break
	}
	return crc16(key) % clusterSlots
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster
// uses it.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
