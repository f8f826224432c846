// Package reqid makes the gateway's request IDs and judges the ones clients
// send: an ID travels to the upstream, comes back on the answer and in the
// access log, so one that is too long or not printable is replaced rather
// than passed on.
package reqid

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// MaxLen bounds an X-Request-Id taken from the client; a longer or
// non-printable one is replaced by a generated ID. A generated ID is
// shorter.
const MaxLen = 128

// Gen makes request IDs "<8 hex pod prefix>-<16 hex counter>" into a fixed
// array: unique per process start (random prefix), cheap, allocation-free.
// It is safe for concurrent use.
type Gen struct {
	prefix [8]byte
	n      atomic.Uint64
}

// NewGen returns a Gen with a random prefix.
func NewGen() *Gen {
	var g Gen
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand doc)
	hex.Encode(g.prefix[:], b[:])
	return &g
}

// Append appends the next ID to dst.
func (g *Gen) Append(dst []byte) []byte {
	n := g.n.Add(1)
	dst = append(dst, g.prefix[:]...)
	dst = append(dst, '-')
	var buf [16]byte
	h := strconv.AppendUint(buf[:0], n, 16)
	for i := len(h); i < 16; i++ {
		dst = append(dst, '0')
	}
	return append(dst, h...)
}

// Valid tells whether a client's ID may be kept: 1 to MaxLen printable
// ASCII characters, no space.
func Valid(v []byte) bool {
	if len(v) == 0 || len(v) > MaxLen {
		return false
	}
	for _, c := range v {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
