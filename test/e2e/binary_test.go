package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// sentinelBinary builds the command once per test run.
// configDir holds the configuration files of the config tests.
const configDir = "../../gateway/testdata/config/"

func sentinelBinary(t *testing.T) string {
	t.Helper()
	root := harness.Root(t)
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sentinel-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "sentinel")
		out, err := exec.Command("go", "build", "-o", binPath, root).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func binaryConfig(listen, admin, upstream string, ip int) string {
	return fmt.Sprintf(`
server: {listen: %q, admin_listen: %q, admin_token: s3cret, drain_delay: 1500ms, shutdown_grace: 3s}
log: {format: json, level: info, access: true}
upstreams:
  api: {targets: [%q]}
routes:
  - {path_prefix: /, upstream: api, resource: default}
limits: {ip: %d, window: 1m}
`, listen, admin, upstream, ip)
}

// keepAlive sends requests one after another on one TCP connection and
// fails the test if the connection drops.
type keepAlive struct {
	conn net.Conn
	r    *bufio.Reader
}

func (k *keepAlive) get(t *testing.T, path string) int {
	t.Helper()
	require.NoError(t, k.conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := fmt.Fprintf(k.conn, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path)
	require.NoError(t, err, "the keep-alive connection dropped")
	resp, err := http.ReadResponse(k.r, nil)
	require.NoError(t, err, "the keep-alive connection dropped")
	var sink bytes.Buffer
	_, _ = sink.ReadFrom(resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestBinaryReloadAndDrain runs the built command: SIGHUP applies a raised
// limit on a connection that stays open, an invalid file keeps the running
// configuration, SIGTERM turns /readyz to 503 while the proxy still serves,
// and every log line is JSON.
func TestBinaryReloadAndDrain(t *testing.T) {
	bin := sentinelBinary(t)
	up := harness.StartUpstream(t)
	listen, admin := harness.FreeAddr(t), harness.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(binaryConfig(listen, admin, up.URL, 3)), 0o600))

	var stderr harness.LogBuffer
	cmd := exec.Command(bin, "-config", path)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	harness.Eventually(t, 10*time.Second, "the admin listener answers /readyz without a token", func() bool {
		return harness.Status("GET", "http://"+admin+"/readyz") == 200
	})

	conn, err := net.Dial("tcp", listen)
	require.NoError(t, err)
	defer conn.Close()
	k := &keepAlive{conn: conn, r: bufio.NewReader(conn)}
	for range 3 {
		assert.Equal(t, 200, k.get(t, "/x"))
	}
	assert.Equal(t, 429, k.get(t, "/x"))

	require.NoError(t, os.WriteFile(path, []byte(binaryConfig(listen, admin, up.URL, 100)), 0o600))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	harness.Eventually(t, 5*time.Second, "the raised limit applies", func() bool { return k.get(t, "/x") == 200 })

	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(binaryConfig(listen, admin, up.URL, 1), "1m", "1sec", 1)), 0o600))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	harness.Eventually(t, 5*time.Second, "the invalid file is logged", func() bool {
		return strings.Contains(stderr.String(), "keeping the running configuration")
	})
	assert.Equal(t, 200, k.get(t, "/x"), "the running limit (100) stays")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	harness.Eventually(t, 2*time.Second, "/readyz answers 503 once draining", func() bool {
		return harness.Status("GET", "http://"+admin+"/readyz") == 503
	})
	assert.Equal(t, 200, k.get(t, "/x"), "the proxy serves during server.drain_delay")
	select {
	case err := <-done:
		done <- err
		require.NoError(t, err, "exit status\n%s", stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit 10s after SIGTERM\n%s", stderr.String())
	}

	var lines, access, limited, allowed int
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		lines++
		if m["msg"] == "access" {
			access++
			assert.NotEmpty(t, m["request_id"], line)
			assert.Equal(t, "127.0.0.1", m["client_ip"], line)
			assert.Equal(t, "default", m["route"], line)
			switch m["decision"] {
			case "rate_limited":
				limited++
				assert.Equal(t, "ip", m["limit"], line)
				assert.EqualValues(t, 429, m["status"], line)
			case "allowed":
				allowed++
				assert.EqualValues(t, 200, m["status"], line)
				assert.Equal(t, strings.TrimPrefix(up.URL, "http://"), m["upstream"], line)
				assert.Contains(t, m, "upstream_ms", line)
			}
		}
	}
	assert.Greater(t, lines, 5)
	assert.GreaterOrEqual(t, limited, 1, "the 429 before the reload")
	assert.GreaterOrEqual(t, allowed, 6)
	t.Logf("%d JSON log lines, %d access lines", lines, access)
}

// TestBinaryCheckAndHelp: -check prints "config OK" and exits 0, or the
// errors and 2; -help exits 0 and explains the environment.
func TestBinaryCheckAndHelp(t *testing.T) {
	bin := sentinelBinary(t)
	out, err := exec.Command(bin, "-check", "-config", configDir+"good_minimal.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "config OK")

	cmd := exec.Command(bin, "-check", "-config", configDir+"bad_algorithm.yaml")
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Equal(t, 2, cmd.ProcessState.ExitCode())
	assert.Contains(t, string(out), "limits.algorithm")

	out, err = exec.Command(bin, "-help").Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "SENTINEL_LIMITS_IP")
	assert.Contains(t, string(out), "SIGHUP")
}

// TestBinaryPrintsOnlyItsResult: -check and -version print their one line
// and nothing else, even on a host where the metrics library's package
// initializer logs (a hybrid cgroup tree without pressure files, as on the
// CI machine); the library's lines wait for the configured logger, which
// works only while logx is initialized before the library.
func TestBinaryPrintsOnlyItsResult(t *testing.T) {
	bin := sentinelBinary(t)
	out, err := exec.Command(bin, "-check", "-config", configDir+"good_minimal.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "config OK\n", string(out))
	out, err = exec.Command(bin, "-version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "sentinel dev\n", string(out))

	cmd := exec.Command(bin, "-version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	logx := strings.Index(string(out), "init github.com/sentinel-gateway/sentinel/internal/logx ")
	lib := strings.Index(string(out), "init github.com/VictoriaMetrics/metrics ")
	require.Positive(t, lib, "%s", out)
	require.Positive(t, logx, "%s", out)
	assert.Less(t, logx, lib, "logx must hold the standard log back before the metrics library's initializer writes to it")
}

// TestBinaryCheckRefusesEachMistake: -check exits 2 and names the key for
// a rule of an unknown tenant, a fractional count, a plan in another case
// than the API accepts, and a bad value from the environment (naming the
// variable); it prints nothing else, and never "config OK".
func TestBinaryCheckRefusesEachMistake(t *testing.T) {
	bin := sentinelBinary(t)
	type mistake struct{ file, env, want string }
	var cases []mistake
	for _, f := range []string{"bad_rule_unknown_tenant.yaml", "bad_fractional_count.yaml", "bad_rule_fractional_limit.yaml", "bad_tenant_plan_case.yaml"} {
		file := configDir + f
		cases = append(cases, mistake{file: file, want: harness.WantLine(t, file)})
	}
	cases = append(cases, mistake{file: configDir + "good_minimal.yaml", env: "SENTINEL_LIMITS_ON_STORE_FAILURE=maybe",
		want: `limits.on_store_failure: "maybe" is not one of local, open, closed (from SENTINEL_LIMITS_ON_STORE_FAILURE)`})
	for _, c := range cases {
		cmd := exec.Command(bin, "-check", "-config", c.file)
		cmd.Env = append(os.Environ(), c.env)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.Error(t, cmd.Run(), c.file)
		assert.Equal(t, 2, cmd.ProcessState.ExitCode(), c.file)
		assert.Empty(t, stdout.String(), c.file)
		assert.Contains(t, stderr.String(), c.want, c.file)
		assert.True(t, strings.HasPrefix(stderr.String(), "sentinel: invalid configuration:\n"), "%s: %s", c.file, stderr.String())
	}
}

func routesConfig(listen, admin, upstreams, routes string) string {
	return fmt.Sprintf(`
server: {listen: %q, admin_listen: %q, admin_token: s3cret, drain_delay: 0s, shutdown_grace: 3s}
log: {format: json, level: info}
upstreams:
%s
routes:
%s
`, listen, admin, upstreams, routes)
}

// TestBinaryReloadRoutes runs the built command: SIGHUP moves a route to a
// second backend, which the next request on the same kept-alive connection
// reaches, and adds a route; an invalid upstream address is refused with
// 400 and the running routes keep serving; POST /v1/reload lists what
// applied.
func TestBinaryReloadRoutes(t *testing.T) {
	bin := sentinelBinary(t)
	one, two := harness.StartUpstream(t), harness.StartUpstream(t)
	listen, admin := harness.FreeAddr(t), harness.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	write := func(upstreams, routes string) {
		require.NoError(t, os.WriteFile(path, []byte(routesConfig(listen, admin, upstreams, routes)), 0o600))
	}
	write(`  one: {targets: [`+one.URL+`]}`, `  - {path_prefix: /, upstream: one}`)
	var stderr harness.LogBuffer
	cmd := exec.Command(bin, "-config", path)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	harness.Eventually(t, 10*time.Second, "the gateway is ready", func() bool { return harness.Status("GET", "http://"+admin+"/readyz") == 200 })
	conn, err := net.Dial("tcp", listen)
	require.NoError(t, err)
	defer conn.Close()
	k := &keepAlive{conn: conn, r: bufio.NewReader(conn)}
	require.Equal(t, 200, k.get(t, "/x"))
	require.Equal(t, 1, int(one.Hits()))

	bothUpstreams := `  one: {targets: [` + one.URL + `]}` + "\n  two: {targets: [" + two.URL + `]}`
	write(bothUpstreams, "  - {path_prefix: /, upstream: two}\n  - {path_prefix: /old, upstream: one, resource: old}")
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	harness.Eventually(t, 5*time.Second, "the route moves to the second backend on the same connection", func() bool {
		require.Equal(t, 200, k.get(t, "/x"))
		return int(two.Hits()) > 0
	})
	n := int(one.Hits())
	assert.Equal(t, 200, k.get(t, "/old/y"))
	assert.Equal(t, n+1, int(one.Hits()), "the added route reaches the first backend")

	write(`  one: {targets: [`+one.URL+`]}`+"\n  two: {targets: [\"htp://"+strings.TrimPrefix(two.URL, "http://")+`"]}`,
		"  - {path_prefix: /, upstream: one}")
	a := harness.Do(t, "POST", "http://"+admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	assert.Equal(t, 400, a.Status)
	assert.Contains(t, string(a.Body), "upstreams.two.targets[0]")
	before := int(two.Hits())
	assert.Equal(t, 200, k.get(t, "/x"))
	assert.Equal(t, before+1, int(two.Hits()), "the running routes keep serving")
	assert.Zero(t, harness.Scrape(t, "http://"+admin, "sentinel_config_last_reload_successful"))

	write(bothUpstreams, "  - {path_prefix: /, upstream: two}\n  - {path_prefix: /old, upstream: one, resource: old}\n  - {path_prefix: /new, upstream: one, resource: new}")
	a = harness.Do(t, "POST", "http://"+admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	require.Equal(t, 200, a.Status, "%s", a.Body)
	assert.Equal(t, []any{"routes"}, a.JSON(t)["applied"])
	n = int(one.Hits())
	assert.Equal(t, 200, k.get(t, "/new"))
	assert.Equal(t, n+1, int(one.Hits()))
	assert.EqualValues(t, 3, harness.Scrape(t, "http://"+admin, "sentinel_config_generation"), "start, SIGHUP, POST")
	assert.EqualValues(t, 1, harness.Scrape(t, "http://"+admin, "sentinel_config_last_reload_successful"))
	assert.Contains(t, stderr.String(), `"upstreams_added":"two"`)
}
