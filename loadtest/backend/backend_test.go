package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sentinel-gateway/sentinel/loadtest/demobackend"
)

// serve runs the backend's handler on an in-memory listener and returns a
// net/http client that reaches it, so that the tests read the bytes on the
// wire (chunks, flushes) as a real client does.
func serve(t *testing.T) *http.Client {
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: withDemoAPIs(demobackend.New(demobackend.Options{}).Handler)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() }}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func do(t *testing.T, c *http.Client, method, target, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, "http://backend"+target, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

type usageJSON struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type completionJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Index        int               `json:"index"`
		Message      map[string]string `json:"message"`
		Delta        map[string]string `json:"delta"`
		FinishReason string            `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
}

func TestChatJSONHeaderAgreesWithBody(t *testing.T) {
	c := serve(t)
	for _, tc := range []struct {
		name, target, body string
		header             map[string]string
		lo, hi             int // completion tokens
	}{
		{"tokens", "/v1/chat/completions?tokens=42", `{"messages":[{"role":"user","content":"hi"}]}`, nil, 42, 42},
		{"max_tokens in body", "/v1/chat/completions", `{"max_tokens":5}`, map[string]string{"X-Max-Tokens": "1000"}, 1, 5},
		{"X-Max-Tokens", "/v1/chat/completions", "", map[string]string{"X-Max-Tokens": "3"}, 1, 3},
		{"default max_tokens", "/v1/chat/completions", "", nil, 1, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(t, c, http.MethodPost, tc.target, tc.body, tc.header)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var out completionJSON
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			require.NotNil(t, out.Usage)
			assert.Equal(t, strconv.Itoa(out.Usage.Total), resp.Header.Get("X-Usage-Total-Tokens"))
			assert.Equal(t, out.Usage.Prompt+out.Usage.Completion, out.Usage.Total)
			assert.GreaterOrEqual(t, out.Usage.Completion, tc.lo)
			assert.LessOrEqual(t, out.Usage.Completion, tc.hi)
			assert.True(t, strings.HasPrefix(out.ID, "chatcmpl-"), out.ID)
			assert.Equal(t, "chat.completion", out.Object)
			require.Len(t, out.Choices, 1)
			assert.Equal(t, "assistant", out.Choices[0].Message["role"])
			assert.NotEmpty(t, out.Choices[0].Message["content"])
			assert.Equal(t, "stop", out.Choices[0].FinishReason)
		})
	}
}

// readStream reads the events of an SSE answer, with the time each arrived.
func readStream(t *testing.T, r io.Reader) (events []string, at []time.Duration) {
	t.Helper()
	start := time.Now()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "an SSE line: %q", line)
		events = append(events, data)
		at = append(at, time.Since(start))
	}
	require.NoError(t, sc.Err())
	return events, at
}

func TestChatStreamEndsWithUsage(t *testing.T) {
	c := serve(t)
	for _, tc := range []struct {
		name, method, target, body string
	}{
		{"stream in body", http.MethodPost, "/v1/chat/completions?tokens=35&delay=1ms", `{"stream":true,"max_tokens":10}`},
		{"stream in query", http.MethodGet, "/v1/chat/completions?stream=true&tokens=35&delay=1ms", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(t, c, tc.method, tc.target, tc.body, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
			assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
			assert.Empty(t, resp.Header.Get("X-Usage-Total-Tokens"), "usage is not known when the headers go")

			events, _ := readStream(t, resp.Body)
			require.Len(t, events, 4+1+1, "35 tokens: 4 content events, the usage event, [DONE]")
			assert.Equal(t, "[DONE]", events[len(events)-1])
			var id string
			for i, e := range events[:4] {
				var chunk completionJSON
				require.NoError(t, json.Unmarshal([]byte(e), &chunk), e)
				assert.Equal(t, "chat.completion.chunk", chunk.Object)
				require.Len(t, chunk.Choices, 1)
				assert.NotEmpty(t, chunk.Choices[0].Delta["content"])
				assert.Nil(t, chunk.Usage, "event %d", i)
				id = chunk.ID
			}
			var final completionJSON
			require.NoError(t, json.Unmarshal([]byte(events[4]), &final))
			assert.Equal(t, id, final.ID)
			assert.Empty(t, final.Choices)
			require.NotNil(t, final.Usage)
			assert.Equal(t, 35, final.Usage.Completion)
			assert.Equal(t, final.Usage.Prompt+35, final.Usage.Total)
		})
	}
}

func TestChatStreamFlushesEachEvent(t *testing.T) {
	c := serve(t)
	// Two events 2 s apart: unflushed, they would arrive together at the
	// end. Only a reader starved for a second could see them closer.
	resp := do(t, c, http.MethodGet, "/v1/chat/completions?stream=true&tokens=20&delay=2s", "", nil)
	events, at := readStream(t, resp.Body)
	require.Len(t, events, 2+1+1)
	assert.GreaterOrEqual(t, at[1]-at[0], time.Second, "the first event arrives when it is sent")
}

func TestChatRejectsBadInput(t *testing.T) {
	c := serve(t)
	for _, target := range []string{"?tokens=x", "?tokens=-1", "?delay=soon", "?stream=maybe"} {
		resp := do(t, c, http.MethodGet, "/v1/chat/completions"+target, "", nil)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, target)
	}
	resp := do(t, c, http.MethodPost, "/v1/chat/completions", "{", nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = do(t, c, http.MethodPost, "/v1/chat/completions", "", map[string]string{"X-Max-Tokens": "lots"})
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestLogin(t *testing.T) {
	c := serve(t)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for _, tc := range []struct {
		name, method, target, body string
		header                     map[string]string
		want                       int
	}{
		{"form", http.MethodPost, "/login", url.Values{"password": {"demo"}}.Encode(), form, 200},
		{"json", http.MethodPost, "/login", `{"user":"ann","password":"demo"}`, map[string]string{"Content-Type": "application/json"}, 200},
		{"query", http.MethodGet, "/login?password=demo", "", nil, 200},
		{"header", http.MethodPost, "/login", "", map[string]string{"X-Password": "demo"}, 200},
		{"wrong form", http.MethodPost, "/login", "password=guess", form, 401},
		{"wrong json", http.MethodPost, "/login", `{"password":"demo2"}`, nil, 401},
		{"wrong header", http.MethodGet, "/login", "", map[string]string{"X-Password": "Demo"}, 401},
		{"none", http.MethodPost, "/login", "", nil, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(t, c, tc.method, tc.target, tc.body, tc.header)
			assert.Equal(t, tc.want, resp.StatusCode)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			want := `{"ok":true}` + "\n"
			if tc.want == 401 {
				want = `{"error":"bad credentials"}` + "\n"
			}
			assert.Equal(t, want, string(body))
		})
	}
}

func TestOtherPathsReachTheDemoBackend(t *testing.T) {
	c := serve(t)
	resp := do(t, c, http.MethodGet, "/hello?x=1", "", nil)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), `"path":"/hello"`)
}
