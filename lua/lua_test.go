package lua

import (
	"strings"
	"testing"
)

func TestScriptsEmbedded(t *testing.T) {
	for name, s := range map[string]string{
		"sliding_window": SlidingWindow,
		"sliding_log":    SlidingLog,
		"token_bucket":   TokenBucket,
		"quota":          Quota,
		"slots":          Slots,
	} {
		if !strings.HasPrefix(s, "-- "+name+":") {
			t.Errorf("%s.lua does not start with its header comment", name)
		}
		expire := "PEXPIRE"
		if name == "quota" {
			expire = "'PXAT'" // the counter is written with its expiry
		}
		for _, word := range []string{"KEYS[1]", "ARGV[1]", "Returns", "redis.call('TIME')", expire} {
			if !strings.Contains(s, word) {
				t.Errorf("%s.lua lacks %q", name, word)
			}
		}
	}
}
