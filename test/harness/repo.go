package harness

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Root is the repository's root folder (the one with go.mod), found from
// the test's working directory.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's folder")
		dir = parent
	}
}

// Path is the file or folder rel (slash-separated) of the repository.
func Path(t testing.TB, rel string) string {
	t.Helper()
	return filepath.Join(Root(t), filepath.FromSlash(rel))
}

// ReadFile reads the repository's file rel (slash-separated).
func ReadFile(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(Path(t, rel))
	require.NoError(t, err)
	return string(b)
}

// WantLine is what a configuration fixture's first line, "# want:
// <message>", says its check must print.
func WantLine(t testing.TB, file string) string {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	require.True(t, sc.Scan())
	want, ok := strings.CutPrefix(sc.Text(), "# want: ")
	require.True(t, ok, "%s: the first line must be '# want: <message>'", file)
	return want
}

// Promtool is the path of Prometheus' promtool; the test fails when it is
// missing.
func Promtool(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"promtool", "/usr/bin/promtool"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("promtool not found: install it with `apt-get install prometheus` (.ci/run does)")
	return ""
}
