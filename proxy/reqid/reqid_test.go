package reqid

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGen(t *testing.T) {
	g := NewGen()
	a, b := string(g.Append(nil)), string(g.Append([]byte("x:")))
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-0{15}1$`), a)
	assert.Equal(t, "x:"+a[:8]+"-0000000000000002", b)
	assert.True(t, Valid([]byte(a)))
	assert.Less(t, len(a), MaxLen)
}

func TestValid(t *testing.T) {
	for v, want := range map[string]bool{
		"abc-123":                     true,
		strings.Repeat("a", MaxLen):   true,
		strings.Repeat("a", MaxLen+1): false,
		"":                            false,
		"a b":                         false,
		"a\x00":                       false,
		"caf\xc3\xa9":                 false,
	} {
		assert.Equal(t, want, Valid([]byte(v)), "%q", v)
	}
}
