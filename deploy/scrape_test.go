package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// The alert rules select the scrape job by name; each scrape config of the
// kit must produce that job, and the Kubernetes one must find the gateway
// pods' admin port and nothing else.

type scrapeConfig struct {
	ScrapeConfigs []struct {
		JobName        string `yaml:"job_name"`
		RelabelConfigs []struct {
			SourceLabels []string `yaml:"source_labels"`
			Regex        string   `yaml:"regex"`
			Action       string   `yaml:"action"`
		} `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

var kitScrapeConfigs = []string{"deploy/prometheus/prometheus.yml", "deploy/k8s/prometheus-scrape-config.yml"}

// alertJobs are the values the alert rules' job matchers ask for.
func alertJobs(t *testing.T) []string {
	t.Helper()
	rules := harness.ReadFile(t, "alerts/rate_limiter_alerts.yml")
	var jobs []string
	for _, m := range regexp.MustCompile(`\bjob\s*=~?\s*"([^"]*)"`).FindAllStringSubmatch(rules, -1) {
		jobs = append(jobs, m[1])
	}
	require.NotEmpty(t, jobs, "SentinelInstanceDown selects up{job=...}")
	return jobs
}

func TestAlertJobsMatchTheKitScrapeJobs(t *testing.T) {
	for _, file := range kitScrapeConfigs {
		var c scrapeConfig
		readYAML(t, file, &c)
		require.Len(t, c.ScrapeConfigs, 1, file)
		for _, job := range alertJobs(t) {
			assert.Regexp(t, "^(?:"+job+")$", c.ScrapeConfigs[0].JobName, "%s: the alert rules select job %q", file, job)
		}
		firesOnDownTarget(t, c.ScrapeConfigs[0].JobName)
	}
}

// firesOnDownTarget runs promtool's rule unit tests on a target of job that
// is down: SentinelInstanceDown must fire for it.
func firesOnDownTarget(t *testing.T, job string) {
	t.Helper()
	rules, err := filepath.Abs("alerts/rate_limiter_alerts.yml")
	require.NoError(t, err)
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job=%q,instance="10.0.0.7:9090"}'
        values: '0x10'
    alert_rule_test:
      - eval_time: 5m
        alertname: SentinelInstanceDown
        exp_alerts:
          - exp_labels: {job: %q, instance: "10.0.0.7:9090", severity: critical}
            exp_annotations:
              summary: "Sentinel instance 10.0.0.7:9090 is down"
              runbook_url: "https://github.com/sentinel-gateway/sentinel/blob/main/docs/runbook.md#sentinelinstancedown"
              description: "Prometheus has not been able to scrape 10.0.0.7:9090 for 1 minute: the pod is gone or its admin listener does not answer."
`, rules, job, job)
	path := filepath.Join(t.TempDir(), "instance_down_test.yml")
	require.NoError(t, os.WriteFile(path, []byte(test), 0o600))
	out, err := exec.Command(harness.Promtool(t), "test", "rules", path).CombinedOutput()
	assert.NoError(t, err, "SentinelInstanceDown on a down target of job %q:\n%s", job, out)
}

// TestKubernetesScrapeJobFindsTheAdminPorts applies the job's keep rules
// (Prometheus' relabelling: the source labels' values joined by ';' must
// match the anchored regex) to the discovery labels of every container port
// of the kit's Deployments: only the gateways' admin ports stay.
func TestKubernetesScrapeJobFindsTheAdminPorts(t *testing.T) {
	var c scrapeConfig
	readYAML(t, "deploy/k8s/prometheus-scrape-config.yml", &c)
	require.Len(t, c.ScrapeConfigs, 1)
	job := c.ScrapeConfigs[0]
	var kept []string
	for key, obj := range k8sManifests(t) {
		dep, ok := obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		for _, ctr := range dep.Spec.Template.Spec.Containers {
			for _, port := range ctr.Ports {
				meta := map[string]string{"__meta_kubernetes_pod_container_port_name": port.Name,
					"__meta_kubernetes_pod_container_name": ctr.Name}
				for k, v := range dep.Spec.Template.Labels {
					meta["__meta_kubernetes_pod_label_"+regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")] = v
				}
				if keeps(t, job.RelabelConfigs, meta) {
					kept = append(kept, fmt.Sprintf("%s:%d", key, port.ContainerPort))
				}
			}
		}
	}
	assert.Equal(t, []string{"Deployment/sentinel:9090"}, kept)
}

func keeps(t *testing.T, rules []struct {
	SourceLabels []string `yaml:"source_labels"`
	Regex        string   `yaml:"regex"`
	Action       string   `yaml:"action"`
}, meta map[string]string) bool {
	t.Helper()
	for _, r := range rules {
		if r.Action != "keep" && r.Action != "drop" {
			continue
		}
		var vals []string
		for _, l := range r.SourceLabels {
			vals = append(vals, meta[l])
		}
		match := regexp.MustCompile("^(?:" + r.Regex + ")$").MatchString(strings.Join(vals, ";"))
		if match != (r.Action == "keep") {
			return false
		}
	}
	return true
}
