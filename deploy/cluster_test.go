package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// TestMakeCluster runs deploy/cluster.sh (make cluster) on free loopback
// ports and checks, through Prometheus' API, that it scrapes the three
// gateways, has loaded the alert rules and has read the metric metadata;
// then it interrupts the script, as Ctrl-C does, and checks that everything
// stopped.
func TestMakeCluster(t *testing.T) {
	ports := harness.FreePorts(t, 9)
	env := append(os.Environ(),
		"BIN="+t.TempDir(),
		fmt.Sprintf("GATEWAY_PORTS=%d %d %d", ports[0], ports[1], ports[2]),
		fmt.Sprintf("ADMIN_PORTS=%d %d %d", ports[3], ports[4], ports[5]),
		fmt.Sprintf("BACKEND_PORT=%d", ports[6]),
		fmt.Sprintf("REDIS_PORT=%d", ports[7]),
		fmt.Sprintf("PROMETHEUS_PORT=%d", ports[8]),
	)
	var out harness.LogBuffer
	cmd := exec.Command("bash", "deploy/cluster.sh", "90")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the script's own process group
			<-done
		}
	})
	prom := fmt.Sprintf("http://127.0.0.1:%d", ports[8])

	var up int
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("cluster.sh ended early (%v):\n%s", err, out.String())
		default:
		}
		up = upTargets(prom)
		if up == 3 {
			break
		}
	}
	require.Equal(t, 3, up, "Prometheus targets up; cluster.sh said:\n%s", out.String())

	var rules struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name string `json:"name"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	require.NoError(t, getJSON(prom+"/api/v1/rules", &rules))
	require.NotEmpty(t, rules.Data.Groups, "alert rules loaded")
	var names []string
	for _, r := range rules.Data.Groups[0].Rules {
		names = append(names, r.Name)
	}
	assert.Contains(t, names, "SentinelInstanceDown")
	assert.Contains(t, names, "SentinelRedisFallbackActive")

	// The real binary exposes # TYPE: Prometheus knows each family's type.
	var meta struct {
		Data map[string][]struct {
			Type string `json:"type"`
		} `json:"data"`
	}
	require.NoError(t, getJSON(prom+"/api/v1/metadata?metric=sentinel_adaptive_mode", &meta))
	require.NotEmpty(t, meta.Data["sentinel_adaptive_mode"], "metadata of sentinel_adaptive_mode")
	assert.Equal(t, "gauge", meta.Data["sentinel_adaptive_mode"][0].Type)

	// The gateways share one Redis: the demo tenant's 5 per 10 s hold across them.
	codes := map[int]int{}
	for i := 0; i < 9; i++ {
		codes[harness.Status("GET", fmt.Sprintf("http://127.0.0.1:%d/hello", ports[i%3]), "X-API-Key", "demo-key-1")]++
	}
	// Leases that expire unused may cost a permit, never add one.
	assert.LessOrEqual(t, codes[200], 5, "demo-key-1 over three gateways: %v", codes)
	assert.Equal(t, 9, codes[200]+codes[429], "only 200 and 429: %v", codes)
	t.Logf("demo-key-1, 9 requests over three gateways: %v", codes)

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case <-done:
		stopped = true
	case <-time.After(20 * time.Second):
		t.Fatalf("cluster.sh did not stop on SIGINT:\n%s", out.String())
	}
	assert.Contains(t, out.String(), "cluster: stopping")
	for _, p := range ports {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), 200*time.Millisecond)
		if err == nil {
			c.Close()
			t.Errorf("port %d still listens after the cluster stopped", p)
		}
	}
	t.Logf("cluster.sh:\n%s", out.String())
}

func upTargets(prom string) int {
	var targets struct {
		Data struct {
			ActiveTargets []struct {
				Health string `json:"health"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if getJSON(prom+"/api/v1/targets", &targets) != nil {
		return 0
	}
	n := 0
	for _, tg := range targets.Data.ActiveTargets {
		if tg.Health == "up" {
			n++
		}
	}
	return n
}

func getJSON(url string, out any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// TestMakeClusterRefusesAHeldPort: with one of its ports held, cluster.sh
// exits non-zero before it builds or starts anything, naming the port, the
// variable that sets it and the process that holds it.
func TestMakeClusterRefusesAHeldPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	held := ln.Addr().(*net.TCPAddr).Port
	ports := harness.FreePorts(t, 8)
	bin := t.TempDir()
	cmd := exec.Command("bash", "deploy/cluster.sh", "5")
	cmd.Env = append(os.Environ(),
		"BIN="+bin,
		fmt.Sprintf("GATEWAY_PORTS=%d %d %d", ports[0], ports[1], ports[2]),
		fmt.Sprintf("ADMIN_PORTS=%d %d %d", ports[3], ports[4], ports[5]),
		fmt.Sprintf("BACKEND_PORT=%d", ports[6]),
		fmt.Sprintf("REDIS_PORT=%d", held),
		fmt.Sprintf("PROMETHEUS_PORT=%d", ports[7]),
	)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Equal(t, 1, cmd.ProcessState.ExitCode(), "%s", out)
	assert.Contains(t, string(out), fmt.Sprintf("cluster: port %d (redis-server, REDIS_PORT) is in use by pid %d (", held, os.Getpid()))
	assert.NotContains(t, string(out), "cluster: up")
	built, err := os.ReadDir(bin)
	require.NoError(t, err)
	assert.Empty(t, built, "nothing is built or started")
}
