package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/upstream"
)

// TestDeclaredBodyOverLimitRefusedAtOnce: a body declared larger than
// server.max_request_body is answered 413 on its Content-Length while the
// client is still sending it slowly, not 408 when the read timeout ends
// (fasthttp waited for the body's first 8 KiB before the handler ran).
// The read timeout is far longer than the client's wait for the answer, so
// the 413 cannot be a timeout's answer.
func TestDeclaredBodyOverLimitRefusedAtOnce(t *testing.T) {
	be := startBackend(t)
	p := startProxy(t, be.url, func(d *Deps, _ *upstream.Config) { d.Config.Server.ReadTimeout = 10 * time.Minute })
	for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
		t.Run(strings.TrimSpace(expect), func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
			require.NoError(t, err)
			defer conn.Close() // a failure ends the connection, and Shutdown does not wait for it
			require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
			_, err = conn.Write([]byte("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 20971520\r\n" + expect + "\r\n"))
			require.NoError(t, err)
			br := bufio.NewReader(conn)
			if expect != "" {
				line, err := br.ReadString('\n')
				require.NoError(t, err)
				if strings.Contains(line, "100 Continue") {
					_, err = br.ReadString('\n') // the blank line after it
					require.NoError(t, err)
				} else {
					br = bufio.NewReader(io.MultiReader(strings.NewReader(line), br))
				}
			}
			_, err = conn.Write([]byte(strings.Repeat("x", 100))) // a slow client's first bytes of 20 MB
			require.NoError(t, err)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "no answer while the client sends its body")
			assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
			_ = resp.Body.Close()
		})
	}
}
