package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

const configDir = "gateway/testdata/config/"

// TestCheckFlag: -check exits 0 for a valid file and 2 for an invalid one
// or a bad environment value; -help exits 0 and an unknown flag 2.
func TestCheckFlag(t *testing.T) {
	assert.Equal(t, 0, run([]string{"-check", "-config", configDir + "good_minimal.yaml"}, nil))
	assert.Equal(t, 2, run([]string{"-check", "-config", configDir + "bad_algorithm.yaml"}, nil))
	assert.Equal(t, 2, run([]string{"-check", "-config", configDir + "good_minimal.yaml"}, []string{"SENTINEL_LIMITS_IP=ten"}))
	assert.Equal(t, 0, run([]string{"-help"}, nil))
	assert.Equal(t, 2, run([]string{"-nonsense"}, nil))
}

func TestRunExitsWithStatus2OnBadConfig(t *testing.T) {
	assert.Equal(t, 2, run([]string{"-config", configDir + "bad_algorithm.yaml"}, nil))
}

// TestPprofFlagRefusesNonLoopback: -pprof on an address other than
// loopback stops the start with status 2.
func TestPprofFlagRefusesNonLoopback(t *testing.T) {
	assert.Equal(t, 2, run([]string{"-pprof", "0.0.0.0:6060", "-config", "config.yaml"}, nil))
}
