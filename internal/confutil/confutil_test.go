package confutil

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"10MB": 10 << 20, "512KB": 512 << 10, "1GiB": 1 << 30, "1048576": 1 << 20,
		"2 mb": 2 << 20, "7b": 7, "3KiB": 3 << 10, "0": 0,
	}
	for s, want := range good {
		got, err := ParseByteSize(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"lots", "", "-1MB", "1.5MB", "MB", "99999999999999GB"} {
		_, err := ParseByteSize(s)
		assert.Error(t, err, s)
	}
	var b ByteSize
	require.NoError(t, b.UnmarshalText([]byte("10MB")))
	assert.Equal(t, "10MiB", b.String())
}

func TestDurationText(t *testing.T) {
	var d Duration
	require.NoError(t, d.UnmarshalText([]byte("1m30s")))
	assert.Equal(t, 90*time.Second, d.D())
	b, err := d.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "1m30s", string(b))
	err = d.UnmarshalText([]byte("fast"))
	assert.EqualError(t, err, `"fast" is not a duration such as 10s or 1m`)
}

// TestDurationAsConfigured: durations are written as a person configures
// them, without the zero units of time.Duration's "1m0s", and read back.
func TestDurationAsConfigured(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Minute: "1m", 720 * time.Hour: "720h", 8760 * time.Hour: "8760h", 90 * time.Minute: "1h30m",
		time.Hour + time.Second: "1h1s", 250 * time.Millisecond: "250ms", 1500 * time.Millisecond: "1.5s",
		10 * time.Second: "10s", time.Microsecond: "1µs", -time.Minute: "-1m0s",
	} {
		assert.Equal(t, want, Duration(d).String(), "%d", d)
		back, err := time.ParseDuration(want)
		require.NoError(t, err)
		assert.Equal(t, d, back, want)
	}
}

// TestDurationJSON: a bad value is a type error that names the field.
func TestDurationJSON(t *testing.T) {
	var v struct {
		Window Duration `json:"window,omitempty"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"window":"250ms"}`), &v))
	assert.Equal(t, 250*time.Millisecond, v.Window.D())
	out, err := json.Marshal(v)
	require.NoError(t, err)
	assert.JSONEq(t, `{"window":"250ms"}`, string(out))
	v.Window = 0
	out, _ = json.Marshal(v)
	assert.JSONEq(t, `{}`, string(out), "a zero window is left out")

	for body, got := range map[string]string{`{"window":"fast"}`: `string "fast"`, `{"window":5}`: "number 5", `{"window":true}`: "bool"} {
		err := json.Unmarshal([]byte(body), &v)
		var te *json.UnmarshalTypeError
		require.ErrorAs(t, err, &te, body)
		assert.Equal(t, "window", te.Field, body)
		assert.Equal(t, got, te.Value, body)
	}
}

func TestChecksNameTheKey(t *testing.T) {
	assert.EqualError(t, Positive("a.b", 0), "a.b: 0s is not a positive duration")
	assert.NoError(t, Positive("a.b", time.Nanosecond))
	assert.EqualError(t, AtLeastOne("a.n", 0), "a.n: 0 must be at least 1")
	assert.NoError(t, AtLeastOne("a.n", 1))
	n := 0
	SetDefault(&n, 5)
	SetDefault(&n, 7)
	assert.Equal(t, 5, n)
}

func TestLoopback(t *testing.T) {
	for hp, want := range map[string]bool{"127.0.0.1:9090": true, "[::1]:1": true, "localhost:80": true,
		"0.0.0.0:9090": false, ":9090": false, "10.0.0.1:1": false, "nonsense": false} {
		assert.Equal(t, want, Loopback(hp), hp)
	}
}
