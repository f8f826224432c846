package deploy_test

import (
	"os"
	"testing"
)

// TestMain runs the tests from the repository's root, where the paths
// they read (README.md, docs/, deploy/, config.yaml) are written from.
func TestMain(m *testing.M) {
	if err := os.Chdir(".."); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
