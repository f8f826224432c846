package logx

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestThrottleCountsWhatItHoldsBack(t *testing.T) {
	th := NewThrottle(2)
	t0 := time.Unix(100, 0)
	for i, want := range []bool{true, true, false, false, false} {
		ok, _ := th.Allow(t0.Add(time.Duration(i) * time.Millisecond))
		assert.Equal(t, want, ok, i)
	}
	ok, suppressed := th.Allow(t0.Add(time.Second))
	assert.True(t, ok)
	assert.Equal(t, 3, suppressed, "the next line that passes says how many were held back")
	_, suppressed = th.Allow(t0.Add(time.Second + time.Millisecond))
	assert.Equal(t, 0, suppressed)
}

func TestConfigNamesKeys(t *testing.T) {
	c := Config{Format: "xml", Level: "loud"}
	c.SetDefaults()
	err := c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `log.format: "xml" is not one of text, json`)
	assert.Contains(t, err.Error(), `log.level: "loud" is not one of debug, info, warn, error`)
}

func TestNewJSONAndLevel(t *testing.T) {
	var buf bytes.Buffer
	level := new(slog.LevelVar)
	log := New(Config{Format: "json", Level: "warn"}, &buf, level)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	level.Set(slog.LevelDebug)
	log.Debug("now shown")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var m map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &m))
	assert.Equal(t, "shown", m["msg"])
	assert.Equal(t, "WARN", m["level"])
}
