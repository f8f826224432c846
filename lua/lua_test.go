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
	} {
		if !strings.HasPrefix(s, "-- "+name+":") {
			t.Errorf("%s.lua does not start with its header comment", name)
		}
		for _, word := range []string{"KEYS[1]", "ARGV[1]", "Returns", "redis.call('TIME')", "PEXPIRE"} {
			if !strings.Contains(s, word) {
				t.Errorf("%s.lua lacks %q", name, word)
			}
		}
	}
}
