package store

import (
	"bytes"
	"testing"
)

func TestAppendKey(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{string(AppendKey(nil, "sentinel", "tenant", []byte("acme"))), "sentinel:{tenant:acme}"},
		{string(AppendKey(nil, "", "ip", []byte("10.0.0.7"))), "{ip:10.0.0.7}"},
		{string(AppendKey(nil, "", "ip", []byte("::1"))), "{ip:%3A%3A1}"},
		{string(AppendKeyStrings(nil, "s", "rule", "acme", "bids")), "s:{rule:acme:bids}"},
		{string(AppendKeyStrings(nil, "", "rule", "a:b", "c")), "{rule:a%3Ab:c}"},
		{string(AppendKeyStrings(nil, "", "rule", "a", "b:c")), "{rule:a:b%3Ac}"},
		{string(AppendKeyStrings(nil, "", "key", "}{%")), "{key:%7D%7B%25}"},
		{string(AppendKey([]byte("x"), "", "t")), "x{t}"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestKeySlots checks the schema's promise: all keys of one script share a
// slot, and different limits of one tenant spread over slots.
func TestKeySlots(t *testing.T) {
	key := AppendKeyStrings(nil, "sentinel", "rule", "acme", "bids")
	slot := storeKeySlot(append(bytes.Clone(key), suffixSlidingLog...))
	for _, suffix := range []string{suffixSlidingLogMeta, suffixSlidingLogIDs, suffixSlidingWindow, suffixTokenBucket} {
		if got := storeKeySlot(append([]byte("p:"), append(bytes.Clone(key), suffix...)...)); got != slot {
			t.Errorf("suffix %s: slot %d, want %d", suffix, got, slot)
		}
	}
	slots := map[uint16]bool{}
	for _, r := range []string{"bids", "ads", "users", "search", "pay", "auth", "x", "y"} {
		slots[storeKeySlot(AppendKeyStrings(nil, "", "rule", "acme", r))] = true
	}
	if len(slots) < 4 {
		t.Errorf("8 rules of one tenant use only %d slots", len(slots))
	}
}

// storeKeySlot is Redis Cluster's HASH_SLOT: CRC16 (XMODEM) of the hash tag, or of
// the whole key when it has none, modulo 16384.
func storeKeySlot(key []byte) uint16 {
	if i := bytes.IndexByte(key, '{'); i >= 0 {
		if j := bytes.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for _, b := range key {
		crc ^= uint16(b) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
