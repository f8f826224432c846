package harness

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Client is the HTTP client of Do and Status: keep-alive, up to 256
// connections per host, a 10 s timeout.
var Client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256},
}

// Answer is a response read whole.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object.
func (a Answer) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.Body, &m), "body %q", a.Body)
	return m
}

// Do sends one request and reads its answer; headers are name, value pairs.
func Do(t testing.TB, method, url, body string, headers ...string) Answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Status sends one request and returns its status, or 0 on a transport
// error (for load loops that must not stop the test from another
// goroutine).
func Status(method, url string, headers ...string) int {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := Client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Passed sends n GET requests to /r with the API key key, in turn to each
// of gws, and counts the answers that passed (200).
func Passed(t testing.TB, gws []*Gateway, n int, key string) int {
	t.Helper()
	ok := 0
	for i := range n {
		if Do(t, "GET", gws[i%len(gws)].URL+"/r", "", "X-API-Key", key).Status == http.StatusOK {
			ok++
		}
	}
	return ok
}
