package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8syaml "sigs.k8s.io/yaml"
)

// The manifests are decoded strictly with the Kubernetes API's own types (an
// unknown or misplaced field fails), and the gateway's pod is checked
// against the rule kubelet applies before it starts a container
// (verifyRunAsNonRoot in pkg/kubelet/kuberuntime), with the image user read
// the way the CRI runtimes read it (getUserFromImage in containerd and
// CRI-O: the part before ':' is a uid when it is numeric, else a name).

// k8sManifests decodes every document of the kustomization's resources
// strictly into its API type; the key is "Kind/name".
func k8sManifests(t *testing.T) map[string]any {
	t.Helper()
	var kust struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile("deploy/k8s/kustomization.yaml")
	require.NoError(t, err)
	require.NoError(t, k8syaml.Unmarshal(b, &kust))
	out := map[string]any{}
	for _, file := range kust.Resources {
		b, err := os.ReadFile(filepath.Join("deploy/k8s", file))
		require.NoError(t, err)
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta struct{ Kind string }
			require.NoError(t, k8syaml.Unmarshal([]byte(doc), &meta), file)
			var obj interface{ GetName() string }
			switch meta.Kind {
			case "Deployment":
				obj = &appsv1.Deployment{}
			case "Service":
				obj = &corev1.Service{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "Secret":
				obj = &corev1.Secret{}
			case "PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			default:
				t.Fatalf("%s: kind %q has no decoder in this test", file, meta.Kind)
			}
			require.NoError(t, k8syaml.UnmarshalStrict([]byte(doc), obj), "%s: %s", file, meta.Kind)
			out[meta.Kind+"/"+obj.GetName()] = obj
		}
	}
	return out
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	objs := k8sManifests(t)
	require.Contains(t, objs, "Deployment/sentinel")
	dep := objs["Deployment/sentinel"].(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	uid, user := imageUser(t, "Dockerfile", "sentinel")
	assert.NoError(t, verifyRunAsNonRoot(&pod, &c, uid, user), "kubelet would refuse to start the gateway")
	sc := effectiveSecurityContext(&pod, &c)
	require.NotNil(t, sc.RunAsUser, "runAsUser")
	require.NotNil(t, sc.RunAsGroup, "runAsGroup")
	require.NotNil(t, uid, "the image's USER is numeric")
	assert.Equal(t, *uid, *sc.RunAsUser, "the pod runs as the image's user")
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	assert.True(t, *sc.ReadOnlyRootFilesystem, "read-only root filesystem")
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		assert.False(t, req.IsZero(), "requests.%s", r)
		assert.False(t, lim.IsZero(), "limits.%s", r)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		require.NotNil(t, p, name)
		require.NotNil(t, p.HTTPGet, name)
		assert.Equal(t, "admin", p.HTTPGet.Port.String(), name)
		assert.Empty(t, p.HTTPGet.HTTPHeaders, "%s: probes need no token", name)
	}
	_, demoUser := imageUser(t, "Dockerfile", "demo-backend")
	assert.Empty(t, demoUser, "the demo backend's USER is numeric too")
}

// TestKubeletNonRootRule shows that the check above is kubelet's: the pod
// spec and image user that kubelet refuses are refused here too.
func TestKubeletNonRootRule(t *testing.T) {
	yes, uid0, uid65532 := true, int64(0), int64(65532)
	pod := &corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes}}
	c := &corev1.Container{Name: "sentinel"}
	err := verifyRunAsNonRoot(pod, c, nil, "nonroot")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "container has runAsNonRoot and image has non-numeric user (nonroot), cannot verify user is non-root")
	assert.Error(t, verifyRunAsNonRoot(pod, c, &uid0, ""), "an image running as root")
	assert.NoError(t, verifyRunAsNonRoot(pod, c, &uid65532, ""))
	c.SecurityContext = &corev1.SecurityContext{RunAsUser: &uid65532}
	assert.NoError(t, verifyRunAsNonRoot(pod, c, nil, "nonroot"), "runAsUser decides before the image")
	c.SecurityContext.RunAsUser = &uid0
	assert.Error(t, verifyRunAsNonRoot(pod, c, nil, ""))
}

// effectiveSecurityContext is the container's security context over the
// pod's, field by field, as kubelet's DetermineEffectiveSecurityContext
// merges them (for the fields checked here).
func effectiveSecurityContext(pod *corev1.PodSpec, c *corev1.Container) corev1.SecurityContext {
	var sc corev1.SecurityContext
	if p := pod.SecurityContext; p != nil {
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = p.RunAsUser, p.RunAsGroup, p.RunAsNonRoot
	}
	if cs := c.SecurityContext; cs != nil {
		if cs.RunAsUser != nil {
			sc.RunAsUser = cs.RunAsUser
		}
		if cs.RunAsGroup != nil {
			sc.RunAsGroup = cs.RunAsGroup
		}
		if cs.RunAsNonRoot != nil {
			sc.RunAsNonRoot = cs.RunAsNonRoot
		}
		sc.ReadOnlyRootFilesystem = cs.ReadOnlyRootFilesystem
	}
	return sc
}

// verifyRunAsNonRoot is kubelet's rule: with runAsNonRoot, a runAsUser must
// not be 0; without one, the image's user must be a numeric uid other than 0.
func verifyRunAsNonRoot(pod *corev1.PodSpec, c *corev1.Container, uid *int64, username string) error {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (container: %s)", c.Name)
		}
		return nil
	}
	switch {
	case uid == nil && username != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (container: %s)", username, c.Name)
	case uid != nil && *uid == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root (container: %s)", c.Name)
	}
	return nil
}

// imageUser reads the last USER of the Dockerfile stage named stage, as the
// CRI runtimes read an image's user: a uid when the part before ':' is
// numeric, else a user name.
func imageUser(t *testing.T, dockerfile, stage string) (*int64, string) {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	require.NoError(t, err)
	var user string
	in := false
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		switch {
		case len(f) >= 4 && strings.EqualFold(f[0], "FROM"):
			in = strings.EqualFold(f[len(f)-2], "AS") && f[len(f)-1] == stage
		case in && len(f) == 2 && strings.EqualFold(f[0], "USER"):
			user = f[1]
		}
	}
	require.NotEmpty(t, user, "stage %s has no USER", stage)
	name, _, _ := strings.Cut(user, ":")
	uid, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return nil, name
	}
	return &uid, ""
}
