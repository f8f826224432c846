package logx

import (
	"bytes"
	"encoding/json"
	"log"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRouteStdlog: lines given to the standard log before the logger exists
// are held, then written by the configured logger at their level, as is
// everything after.
func TestRouteStdlog(t *testing.T) {
	log.Printf("INFO: metrics: disable exposing PSI metrics because of failed init: open x: no such file")
	var buf bytes.Buffer
	RouteStdlog(New(Config{Format: "json", Level: "info"}, &buf, new(slog.LevelVar)))
	log.Printf("ERROR: metrics: cannot read process_io_* metrics")
	log.Print("plain")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	want := []struct{ level, msg string }{
		{"INFO", "metrics: disable exposing PSI metrics because of failed init: open x: no such file"},
		{"ERROR", "metrics: cannot read process_io_* metrics"},
		{"INFO", "plain"},
	}
	for i, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		assert.Equal(t, want[i].level, m["level"], line)
		assert.Equal(t, want[i].msg, m["msg"], line)
	}
}
