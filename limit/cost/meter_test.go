package cost

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// meterCase is an answer and the value a Meter reads from it.
type meterCase struct {
	name string
	path string
	body string
	want int64 // -1: no value
}

var jsonCases = []meterCase{
	{"depth 2", "usage.total_tokens", `{"id":"x","usage":{"prompt_tokens":5,"total_tokens":12}}`, 12},
	{"depth 1", "total", `{"total": 7}`, 7},
	{"depth 3", "a.b.c", `{"a":{"x":1,"b":{"y":[1,2],"c":3}}}`, 3},
	{"spaces and newlines", "a.b", " \r\n\t{ \"a\" :\n{ \"b\"\t: 4 } }\n ", 4},
	{"after nested values", "a.b", `{"z":{"q":{"r":[{"a":{"b":1}}]}},"a":{"y":{"b":2},"b":5}}`, 5},
	{"same key elsewhere", "usage.total_tokens", `{"total_tokens":99,"other":{"total_tokens":98},"usage":{"total_tokens":12}}`, 12},
	{"same key only elsewhere", "usage.total_tokens", `{"other":{"total_tokens":99},"total_tokens":1}`, -1},
	{"path in a string", "usage.total_tokens", `{"note":"\"usage\":{\"total_tokens\":99}","usage":{"total_tokens":1}}`, 1},
	{"object in a string", "usage.total_tokens", `{"usage":"{\"total_tokens\":5}"}`, -1},
	{"braces in strings", "usage.total_tokens", `{"a":"}}}{{[[\\","usage":{"x":"]","total_tokens":6}}`, 6},
	{"in an array", "usage.total_tokens", `{"usage":[{"total_tokens":5}]}`, -1},
	{"array decoy", "usage.total_tokens", `{"choices":[{"usage":{"total_tokens":9}},[{"usage":1}]],"usage":{"total_tokens":4}}`, 4},
	{"top array", "usage.total_tokens", `[{"usage":{"total_tokens":3}}]`, -1},
	{"escaped key", "usage.total_tokens", `{"us\u0061ge":{"total\u005ftokens":8}}`, 8},
	{"escaped quote in key", "usage.total_tokens", `{"usa\"ge":{"total_tokens":8}}`, -1},
	{"utf-8 key", "données.n", `{"donn\u00e9es":{"n":2}}`, 2},
	{"raw utf-8 key", "données.n", `{"données":{"n":3}}`, 3},
	{"surrogate key", "a", `{"\ud83d\ude00":1,"a":2}`, 2},
	{"longer key", "usage.total", `{"usage":{"total_tokens":5,"tot":6}}`, -1},
	{"12.0", "n", `{"n":12.0}`, 12},
	{"1e3", "n", `{"n":1e3}`, 1000},
	{"1E+2", "n", `{"n":1E+2}`, 100},
	{"fraction up", "n", `{"n":12.01}`, 13},
	{"0.1", "n", `{"n":0.1}`, 1},
	{"zero", "n", `{"n":0}`, 0},
	{"minus zero", "n", `{"n":-0.0}`, 0},
	{"negative", "n", `{"n":-5}`, -1},
	{"max int64", "n", `{"n":9223372036854775807}`, 9223372036854775807},
	{"past int64", "n", `{"n":9223372036854775808}`, -1},
	{"1e19", "n", `{"n":1e19}`, -1},
	{"long number", "n", `{"n":1.000000000000000000000000000000001}`, -1},
	{"string", "n", `{"n":"12"}`, -1},
	{"null", "n", `{"n":null}`, -1},
	{"object", "n", `{"n":{"n":1}}`, -1},
	{"last wins", "n", `{"n":1,"n":2}`, 2},
	{"last null wins", "u.n", `{"u":{"n":1},"u":{"n":null}}`, -1},
	{"literals", "n", `{"a":true,"b":false,"c":null,"n":5,"d":[true,null]}`, 5},
	{"empty", "n", `{}`, -1},
	{"truncated", "usage.total_tokens", `{"usage":{"total_tokens":12}`, -1},
	{"trailing bytes", "n", `{"n":12}x`, -1},
	{"two documents", "n", `{"n":12}{"n":1}`, -1},
	{"leading zero", "n", `{"n":012}`, -1},
	{"trailing comma", "n", `{"n":12,}`, -1},
	{"bare key", "n", `{n:12}`, -1},
	{"bad literal", "n", `{"a":tru,"n":1}`, -1},
	{"control in string", "n", "{\"a\":\"\x01\",\"n\":1}", -1},
	{"bad escape", "n", `{"a":"\x","n":1}`, -1},
	{"bad number", "n", `{"n":1.}`, -1},
	{"missing colon", "n", `{"n" 1}`, -1},
	{"array end in object", "n", `{"n":1]`, -1},
	{"not json", "n", `<html>n</html>`, -1},
	{"nothing", "n", ``, -1},
}

// OpenAI-style chunks: content deltas, then a usage chunk, then [DONE].
const openAIDelta = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi \"there\" {"}}],"usage":null}` + "\n\n"
const openAIUsage = `data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}` + "\n\n"

var sseCases = []meterCase{
	{"openai", "usage.total_tokens", openAIDelta + openAIDelta + openAIUsage + "data: [DONE]\n\n", 12},
	{"last event wins", "usage.total_tokens", "data: {\"usage\":{\"total_tokens\":3}}\n\n" + openAIDelta + openAIUsage, 12},
	{"earlier event stands", "usage.total_tokens", openAIUsage + openAIDelta + "data: {\"usage\":{}}\n\n" + "data: [DONE]\n\n", 12},
	{"no usage", "usage.total_tokens", openAIDelta + "data: [DONE]\n\n", -1},
	{"multi-line data", "usage.total_tokens", "data: {\"usage\":\ndata: {\"total_tokens\":4}}\n\n", 4},
	{"data alone", "u", "data\ndata: {\"u\":2}\n\n", 2},
	{"data in a string split", "u", "data: {\"s\":\"a\ndata: b\",\"u\":2}\n\n", -1},
	{"comments", "u", ": keepalive\n\n: ping\ndata: {\"u\":2}\n: mid\n\n:\n\n", 2},
	{"event without data", "u", "data: {\"u\":2}\n\nevent: ping\n\nid: 7\nretry: 10\n\n", 2},
	{"crlf", "u", "event: x\r\ndata: {\"u\":\r\ndata: 3}\r\n\r\ndata: [DONE]\r\n\r\n", 3},
	{"cr", "u", "data: {\"u\":3}\r\rdata: {\"v\":1}\r\r", 3},
	{"no space", "u", "data:{\"u\":3}\n\n", 3},
	{"two spaces", "u", "data:  {\"u\":3}\n\n", 3},
	{"other fields", "u", "dat: {\"u\":1}\n\ndatas: {\"u\":1}\n\nevent: data\n\nDATA: {\"u\":1}\n\n", -1},
	{"field value data", "u", "id: data: {\"u\":1}\n\n", -1},
	{"anthropic", "usage.output_tokens", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 15},
	{"unterminated last event", "u", "data: {\"u\":1}\n\ndata: {\"u\":2}\n", 2},
	{"cut last event", "u", "data: {\"u\":1}\n\ndata: {\"u\":2", 1},
	{"bad json event", "u", "data: {\"u\":1}\n\ndata: {\"u\":2,}\n\n", 1},
	{"dispatched twice", "u", "data: {\"u\":1}\n\n\n\n", 1},
	{"empty", "u", "", -1},
}

// read feeds body to a fresh Meter in the chunks of split and returns its
// value, -1 for none.
func read(t testing.TB, a *Actual, ct string, chunks ...[]byte) int64 {
	t.Helper()
	var m Meter
	m.Reset(a, []byte(ct))
	for _, c := range chunks {
		n, err := m.Write(c)
		require.NoError(t, err)
		require.Equal(t, len(c), n)
	}
	v, ok := m.Value()
	if !ok {
		return -1
	}
	return v
}

// requireChunkless checks that body gives want whole, split at every byte
// boundary, and one byte at a time.
func requireChunkless(t *testing.T, a *Actual, ct, body string, want int64) {
	t.Helper()
	b := []byte(body)
	require.Equal(t, want, read(t, a, ct, b), "whole")
	for i := 0; i <= len(b); i++ {
		require.Equal(t, want, read(t, a, ct, b[:i], b[i:]), "split at %d", i)
	}
	bytewise := make([][]byte, len(b))
	for i := range b {
		bytewise[i] = b[i : i+1]
	}
	require.Equal(t, want, read(t, a, ct, bytewise...), "byte by byte")
}

func TestMeterJSON(t *testing.T) {
	for _, tc := range jsonCases {
		t.Run(tc.name, func(t *testing.T) {
			requireChunkless(t, &Actual{JSON: tc.path}, "application/json", tc.body, tc.want)
		})
	}
}

func TestMeterSSE(t *testing.T) {
	for _, tc := range sseCases {
		t.Run(tc.name, func(t *testing.T) {
			requireChunkless(t, &Actual{SSE: tc.path}, "text/event-stream", tc.body, tc.want)
		})
	}
}

// TestMeterDepth: nesting up to maxDepth is read; deeper gives up.
func TestMeterDepth(t *testing.T) {
	nest := func(n int) string {
		return `{"x":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `,"n":1}`
	}
	a := &Actual{JSON: "n"}
	assert.Equal(t, int64(1), read(t, a, "", []byte(nest(maxDepth))))
	assert.Equal(t, int64(-1), read(t, a, "", []byte(nest(maxDepth+1))))
}

// TestMeterFraming: the media type picks the framing, and the configured
// key decides for other types.
func TestMeterFraming(t *testing.T) {
	doc := `{"usage":{"total_tokens":12}}`
	stream := "data: " + doc + "\n\n"
	for _, tc := range []struct {
		a        *Actual
		ct, body string
		want     int64
	}{
		{&Actual{SSE: "usage.total_tokens"}, "text/event-stream; charset=utf-8", stream, 12},
		{&Actual{SSE: "usage.total_tokens"}, "application/json; charset=utf-8", doc, 12},
		{&Actual{SSE: "usage.total_tokens"}, "application/vnd.api+JSON", doc, 12},
		{&Actual{SSE: "usage.total_tokens"}, "", stream, 12},
		{&Actual{SSE: "usage.total_tokens"}, "text/plain", doc, -1},
		{&Actual{JSON: "usage.total_tokens"}, "Text/Event-Stream", stream, 12},
		{&Actual{JSON: "usage.total_tokens"}, "", doc, 12},
		{&Actual{JSON: "usage.total_tokens"}, "text/plain", doc, 12},
		{&Actual{JSON: "usage..total_tokens"}, "", doc, -1},
		{&Actual{Header: "X-Usage"}, "application/json", doc, -1},
		{&Actual{}, "application/json", doc, -1},
		{nil, "application/json", doc, -1},
	} {
		assert.Equal(t, tc.want, read(t, tc.a, tc.ct, []byte(tc.body)), "%+v %s", tc.a, tc.ct)
	}
	var zero Meter
	_, _ = zero.Write([]byte(doc))
	_, ok := zero.Value()
	assert.False(t, ok, "the zero Meter reads nothing")
}

// TestMeterReuse: Reset forgets the previous answer.
func TestMeterReuse(t *testing.T) {
	var m Meter
	a := &Actual{SSE: "u"}
	m.Reset(a, []byte("text/event-stream"))
	_, _ = m.Write([]byte("data: {\"u\":5}\n\n"))
	v, ok := m.Value()
	require.True(t, ok)
	require.Equal(t, int64(5), v)
	m.Reset(a, []byte("text/event-stream"))
	_, _ = m.Write([]byte("data: {\"v\":5}\n\n"))
	_, ok = m.Value()
	assert.False(t, ok)
}

// FuzzMeterChunking: an answer gives the same value whole and split at any
// two points, in both framings.
func FuzzMeterChunking(f *testing.F) {
	for _, tc := range jsonCases {
		f.Add([]byte(tc.body), uint16(3), uint16(11), false)
	}
	for _, tc := range sseCases {
		f.Add([]byte(tc.body), uint16(5), uint16(40), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, i, j uint16, sse bool) {
		a := &Actual{JSON: "u"}
		if sse {
			a = &Actual{SSE: "u"}
		}
		x, y := int(i)%(len(body)+1), int(j)%(len(body)+1)
		x, y = min(x, y), max(x, y)
		whole := read(t, a, "", body)
		require.Equal(t, whole, read(t, a, "", body[:x], body[x:y], body[y:]), "split at %d, %d", x, y)
	})
}

// FuzzMatcherJSON: the matcher agrees with encoding/json on whether a
// document is JSON and on the number at the path a.b.
func FuzzMatcherJSON(f *testing.F) {
	for _, tc := range jsonCases {
		f.Add([]byte(strings.ReplaceAll(strings.ReplaceAll(tc.body, `"usage"`, `"a"`), `"total_tokens"`, `"b"`)))
	}
	f.Add([]byte(`{"a":{"b":1e2}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if bytes.Count(doc, []byte("["))+bytes.Count(doc, []byte("{")) > maxDepth {
			return // past the matcher's depth
		}
		var m matcher
		require.True(t, m.reset("a.b"))
		m.write(doc)
		got, ok := m.value()
		want, wantOK := stdlibValue(doc)
		require.Equal(t, wantOK, ok, "found")
		require.Equal(t, want, got)
	})
}

// stdlibValue is the number at a.b by encoding/json and parseNumber.
func stdlibValue(doc []byte) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if !json.Valid(doc) || dec.Decode(&v) != nil {
		return 0, false
	}
	a, _ := v.(map[string]any)
	b, _ := a["a"].(map[string]any)
	n, isNum := b["b"].(json.Number)
	if !isNum || len(n) > 32 {
		return 0, false
	}
	return parseNumber([]byte(n))
}
