package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sentinel-gateway/sentinel/gateway"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The deploy kit cannot be run here (no Docker daemon, no Kubernetes API), so
// these tests check what can be checked without them: the files parse, the
// gateway accepts the configuration and environment each one gives it, and
// the names that tie the pieces together (ports, labels, secrets, mounts,
// scrape targets) agree.

const imageConfig = "deploy/sentinel.yaml"

func TestImageConfigRefusesToStartWithoutUpstreamAndToken(t *testing.T) {
	_, err := gateway.LoadConfig(imageConfig, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "upstreams.api.targets: must list at least one http(s) URL")
	assert.Contains(t, err.Error(), "server.admin_token: required")

	_, err = gateway.LoadConfig(imageConfig, []string{"SENTINEL_SERVER_ADMIN_TOKEN=t"})
	require.Error(t, err, "no upstream")
	assert.Contains(t, err.Error(), "upstreams.api.targets")

	cfg, err := gateway.LoadConfig(imageConfig, []string{"SENTINEL_SERVER_ADMIN_TOKEN=t", "SENTINEL_UPSTREAMS_API_TARGETS=http://backend:9000"})
	require.NoError(t, err)
	assert.Empty(t, cfg.Tenants, "the image ships no tenants")
	assert.Empty(t, cfg.Rules, "the image ships no rules")
	assert.Equal(t, ":9090", cfg.Admin.Listen, "the admin API must be reachable from outside the container")
	assert.Equal(t, []string{"http://backend:9000"}, cfg.Upstreams["api"].Targets)
}

func TestDockerfileShipsTheImageConfig(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	assert.Contains(t, string(b), "COPY "+imageConfig+" /etc/sentinel/config.yaml")
	assert.NotContains(t, string(b), "COPY config.yaml", "the demo config (published keys) must not be in the image")
}

type composeFile struct {
	Services map[string]struct {
		Build       any               `yaml:"build"`
		Image       string            `yaml:"image"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
}

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestComposeFile(t *testing.T) {
	var c composeFile
	readYAML(t, "deploy/compose.yaml", &c)
	for _, s := range []string{"redis", "backend", "sentinel-1", "sentinel-2", "sentinel-3", "prometheus", "grafana"} {
		require.Contains(t, c.Services, s)
	}
	for _, name := range []string{"sentinel-1", "sentinel-2", "sentinel-3"} {
		s := c.Services[name]
		var env []string
		for k, v := range s.Environment {
			v = strings.NewReplacer("${SENTINEL_ADMIN_TOKEN:-change-me}", "change-me").Replace(v)
			env = append(env, k+"="+v)
		}
		cfg, err := gateway.LoadConfig(imageConfig, env)
		require.NoError(t, err, "%s: the image's config with this environment", name)
		assert.Equal(t, []string{"redis:6379"}, cfg.Redis.Addrs, name)
		assert.Equal(t, []string{"http://backend:9000"}, cfg.Upstreams["api"].Targets, name)
	}
	// Every mounted file exists.
	mounts := map[string]string{}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			host, inside, _ := strings.Cut(v, ":")
			inside, _, _ = strings.Cut(inside, ":")
			_, err := os.Stat(filepath.Join("deploy", host))
			assert.NoError(t, err, "%s mounts %s", name, host)
			mounts[inside] = filepath.Join("deploy", host)
		}
	}
	var p promConfig
	readYAML(t, mounts["/etc/prometheus/prometheus.yml"], &p)
	require.Len(t, p.ScrapeConfigs, 1)
	assert.Equal(t, "sentinel", p.ScrapeConfigs[0].JobName, "the alert rules select job=\"sentinel\"")
	assert.ElementsMatch(t, []string{"sentinel-1:9090", "sentinel-2:9090", "sentinel-3:9090"}, p.ScrapeConfigs[0].StaticConfigs[0].Targets)
	require.Len(t, p.RuleFiles, 1)
	assert.Equal(t, "alerts/rate_limiter_alerts.yml", mounts[p.RuleFiles[0]])
	assert.Equal(t, "docs/dashboard.json", mounts["/var/lib/grafana/dashboards/sentinel.json"])
}

// k8sObject holds the fields of the manifests that the test checks.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas     int                `yaml:"replicas"`
		MinAvailable int                `yaml:"minAvailable"`
		Selector     k8sSelector        `yaml:"selector"` // Deployment, PDB: matchLabels; Service: labels
		Ports        []k8sServicePort   `yaml:"ports"`
		Template     k8sPodTemplateSpec `yaml:"template"`
	} `yaml:"spec"`
}

type k8sSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
	Labels      map[string]string `yaml:",inline"`
}

type k8sServicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

type k8sPodTemplateSpec struct {
	Metadata struct {
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
		Containers                    []k8sContainer `yaml:"containers"`
		Volumes                       []struct {
			Name      string `yaml:"name"`
			ConfigMap struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		ValueFrom struct {
			SecretKeyRef struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path        string `yaml:"path"`
		Port        string `yaml:"port"`
		HTTPHeaders []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"httpHeaders"`
	} `yaml:"httpGet"`
}

func TestKubernetesManifests(t *testing.T) {
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, "deploy/k8s/kustomization.yaml", &kust)
	objs := map[string]k8sObject{} // "Kind/name"
	for _, file := range kust.Resources {
		for _, o := range readYAMLDocs(t, filepath.Join("deploy/k8s", file)) {
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	for _, want := range []string{"Deployment/sentinel", "Service/sentinel", "Service/sentinel-admin", "PodDisruptionBudget/sentinel",
		"ConfigMap/sentinel-config", "Secret/sentinel-admin", "Deployment/redis", "Service/redis"} {
		require.Contains(t, objs, want)
	}
	dep := objs["Deployment/sentinel"]
	pod := dep.Spec.Template
	assert.Equal(t, dep.Spec.Selector.MatchLabels, pick(pod.Metadata.Labels, dep.Spec.Selector.MatchLabels), "selector matches the pod labels")
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	assert.Equal(t, map[string]int{"http": 8080, "admin": 9090}, ports)

	// Probes: liveness /healthz, readiness /readyz, on the admin port.
	for probe, path := range map[*k8sProbe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz", c.StartupProbe: "/healthz"} {
		require.NotNil(t, probe)
		require.NotNil(t, probe.HTTPGet)
		assert.Equal(t, path, probe.HTTPGet.Path)
		assert.Equal(t, "admin", probe.HTTPGet.Port)
	}

	// The token comes from the Secret; the probes carry no copy of it.
	secret := objs["Secret/sentinel-admin"]
	var token string
	for _, e := range c.Env {
		if e.Name == "SENTINEL_SERVER_ADMIN_TOKEN" {
			ref := e.ValueFrom.SecretKeyRef
			require.Contains(t, objs, "Secret/"+ref.Name)
			token = objs["Secret/"+ref.Name].StringData[ref.Key]
		}
	}
	require.NotEmpty(t, token, "SENTINEL_SERVER_ADMIN_TOKEN from the Secret")
	assert.Equal(t, secret.StringData["token"], token)
	for _, probe := range []*k8sProbe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		assert.Empty(t, probe.HTTPGet.HTTPHeaders, "probes need no token")
	}

	// The config file is the ConfigMap's, and the gateway accepts it.
	require.Len(t, c.VolumeMounts, 1)
	require.Len(t, pod.Spec.Volumes, 1)
	assert.Equal(t, c.VolumeMounts[0].Name, pod.Spec.Volumes[0].Name)
	cm := objs["ConfigMap/"+pod.Spec.Volumes[0].ConfigMap.Name]
	assert.Equal(t, []string{"-config", c.VolumeMounts[0].MountPath + "/config.yaml"}, c.Args)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o600))
	cfg, err := gateway.LoadConfig(path, []string{"SENTINEL_SERVER_ADMIN_TOKEN=" + token})
	require.NoError(t, err, "the ConfigMap's config.yaml")
	assert.Less(t, (cfg.Proxy.Server.ShutdownGrace + *cfg.Proxy.Server.DrainDelay).Seconds(), float64(pod.Spec.TerminationGracePeriodSeconds),
		"the pod must outlive the drain delay and the shutdown grace")
	assert.False(t, cfg.Admin.ProbesRequireToken)
	_, err = gateway.LoadConfig(path, nil)
	assert.Error(t, err, "without the Secret's token the gateway must refuse to start")

	// Redis: the config points at the Service.
	redisSvc := objs["Service/redis"]
	require.Len(t, cfg.Redis.Addrs, 1)
	assert.Equal(t, "redis:6379", cfg.Redis.Addrs[0])
	assert.Equal(t, 6379, redisSvc.Spec.Ports[0].Port)

	// Services and the PDB select the gateway pods, on named container ports.
	for _, name := range []string{"Service/sentinel", "Service/sentinel-admin"} {
		svc := objs[name]
		assert.Equal(t, svc.Spec.Selector.Labels, pick(pod.Metadata.Labels, svc.Spec.Selector.Labels), name)
		for _, p := range svc.Spec.Ports {
			assert.Contains(t, ports, p.TargetPort, "%s targets a container port by name", name)
		}
	}
	pdb := objs["PodDisruptionBudget/sentinel"]
	assert.Equal(t, dep.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels)
	assert.Greater(t, pdb.Spec.MinAvailable, 0)
	assert.Less(t, pdb.Spec.MinAvailable, dep.Spec.Replicas, "a PDB as large as the Deployment blocks every drain")
}

// pick returns the entries of labels whose keys are in want (non-empty want).
func pick(labels, want map[string]string) map[string]string {
	if len(want) == 0 {
		return map[string]string{"": "no selector"}
	}
	out := map[string]string{}
	for k := range want {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, out), path)
}

func readYAMLDocs(t *testing.T, path string) []k8sObject {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, path)
		require.NotEmpty(t, o.Kind, "%s: a document without kind", path)
		out = append(out, o)
	}
}
