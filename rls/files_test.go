package rls

import (
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peerDir holds envoyproxy/ratelimit's own configuration fixtures (NOTICE).
const peerDir = "testdata/envoy-ratelimit"

func peerFile(name string) string { return filepath.Join(peerDir, name) }

// TestLoadFilesPeerValid: every valid configuration of envoyproxy/ratelimit's
// tests loads (merge_domain_key2 alone: two files of one domain are refused,
// as envoyproxy/ratelimit refuses them unless told to merge).
func TestLoadFilesPeerValid(t *testing.T) {
	for _, name := range []string{"basic_config.yaml", "wildcard.yaml", "shadowmode_config.yaml", "metadata.yaml",
		"share_threshold.yaml", "merge_domain_key1.yaml", "merge_domain_key2.yaml", "duplicate_domain.yaml"} {
		t.Run(name, func(t *testing.T) {
			f, err := LoadFiles([]string{peerFile(name)})
			require.NoError(t, err)
			assert.True(t, f.Domain("test-domain"))
		})
	}
}

// TestLoadFilesPeerInvalid: every invalid configuration of envoyproxy/ratelimit's
// tests is refused, with a message naming the file, the domain and the
// descriptor key when it got that far.
func TestLoadFilesPeerInvalid(t *testing.T) {
	for _, tc := range []struct {
		files []string
		want  []string
	}{
		{[]string{"empty_domain.yaml"}, []string{"empty_domain.yaml", "empty domain"}},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, []string{"duplicate_domain.yaml", `domain "test-domain"`, "duplicate domain"}},
		{[]string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, []string{"merge_domain_key2.yaml", `domain "test-domain"`, "duplicate domain"}},
		{[]string{"empty_key.yaml"}, []string{"empty_key.yaml", `domain "test-domain"`, "empty key"}},
		{[]string{"duplicate_key.yaml"}, []string{"duplicate_key.yaml", `domain "test-domain"`, `key "test-domain.key1_value1"`, "duplicate descriptor composite key"}},
		{[]string{"bad_limit_unit.yaml"}, []string{"bad_limit_unit.yaml", `key "test-domain.key1_value1"`, `invalid rate limit unit "foo"`}},
		{[]string{"replaces_self.yaml"}, []string{"replaces_self.yaml", `key "test-domain.key1_value1.subkey1"`, "replaces should not contain name of same descriptor"}},
		{[]string{"replaces_empty.yaml"}, []string{"replaces_empty.yaml", `key "test-domain.key1_value1.subkey1"`, "empty replaces entry"}},
		{[]string{"unlimited_with_unit.yaml"}, []string{"unlimited_with_unit.yaml", `key "test-domain.foo"`, "should not specify rate limit unit when unlimited"}},
		{[]string{"bad_yaml.yaml"}, []string{"bad_yaml.yaml", "cannot parse YAML"}},
		{[]string{"misspelled_key.yaml"}, []string{"misspelled_key.yaml", `unknown key "ratelimit"`}},
		{[]string{"misspelled_key2.yaml"}, []string{"misspelled_key2.yaml", `unknown key "requestsperunit"`}},
		{[]string{"non_string_key.yaml"}, []string{"non_string_key.yaml", `key "0.25" is not a string`}},
		{[]string{"non_map_list.yaml"}, []string{"non_map_list.yaml", "not a map"}},
	} {
		t.Run(tc.files[len(tc.files)-1], func(t *testing.T) {
			paths := make([]string, len(tc.files))
			for i, f := range tc.files {
				paths[i] = peerFile(f)
			}
			_, err := LoadFiles(paths)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "grpc.config_files: ")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestLoadFilesEveryPeerFixture: no fixture is left out of the two tests above.
func TestLoadFilesEveryPeerFixture(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(peerDir, "*.yaml"))
	require.NoError(t, err)
	assert.Len(t, names, 20, "a new fixture needs a row in TestLoadFilesPeerValid or TestLoadFilesPeerInvalid")
}

// writeFile writes a configuration file in a test's temporary directory.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestMatchPeerBasic: the lookups of basic_config.yaml, as
// envoyproxy/ratelimit's config test makes them.
func TestMatchPeerBasic(t *testing.T) {
	f, err := LoadFiles([]string{peerFile("basic_config.yaml"), writeFile(t, "x.yaml", "domain: other\n")})
	require.NoError(t, err)
	d := f.domains["test-domain"]
	for _, tc := range []struct {
		entries []string
		perUnit uint32
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{[]string{"key1", "value1"}, 0, 0}, // no rate_limit at the top
		{[]string{"key1", "value1", "subkey1", "something"}, 5, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{[]string{"key1", "value1", "subkey1", "subvalue1"}, 10, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{[]string{"key1", "value1", "subkey1", "subvalue1", "deeper", "x"}, 0, 0}, // deeper than the rule
		{[]string{"key2", "something"}, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{[]string{"key2", "value2"}, 30, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{[]string{"key2", "value3"}, 0, 0}, // listed without rate_limit: exempt
		{[]string{"key2", "value2", "subkey", "x"}, 0, 0},
		{[]string{"key3", "foo"}, 1, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{[]string{"key4", "foo"}, 1, rlsv3.RateLimitResponse_RateLimit_DAY},
		{[]string{"key5", "value5", "subkey5", "subvalue5"}, 25, rlsv3.RateLimitResponse_RateLimit_DAY},
		{[]string{"key5", "value5"}, 15, rlsv3.RateLimitResponse_RateLimit_DAY},
		{[]string{"unknown", "x"}, 0, 0},
	} {
		r, _ := d.match(descriptor(tc.entries...), nil)
		if tc.perUnit == 0 {
			assert.Nil(t, r, "%v", tc.entries)
			continue
		}
		if assert.NotNil(t, r, "%v", tc.entries) {
			assert.Equal(t, tc.perUnit, r.perUnit, "%v", tc.entries)
			assert.Equal(t, tc.unit, r.unit, "%v", tc.entries)
		}
	}
	r, _ := d.match(descriptor("key4", "x"), nil)
	assert.Equal(t, "key4_rate_limit", r.name)
	assert.Equal(t, "key4_rate_limit", r.label())
	r, _ = d.match(descriptor("key3", "x"), nil)
	assert.Equal(t, "test-domain.key3", r.label())
}

// TestMatchPeerWildcard: wildcard values, trailing and inside, as in
// envoyproxy/ratelimit's wildcard.yaml.
func TestMatchPeerWildcard(t *testing.T) {
	f, err := LoadFiles([]string{peerFile("wildcard.yaml")})
	require.NoError(t, err)
	d := f.domains["test-domain"]
	for _, tc := range []struct {
		entries []string
		perUnit uint32
	}{
		{[]string{"wild", "foo"}, 20},
		{[]string{"wild", "foobar"}, 20},
		{[]string{"wild", "fo"}, 0},
		{[]string{"noWild", "foo"}, 20},
		{[]string{"noWild", "foobar"}, 0},
		{[]string{"noVal", "anything"}, 20},
		{[]string{"midWild", "barb"}, 20},
		{[]string{"midWild", "bar-xyz-b"}, 20},
		{[]string{"midWild", "bar-xyz-c"}, 0},
		{[]string{"multiWild", "foo1bar2baz"}, 10},
		{[]string{"multiWild", "foobarbaz"}, 10},
		{[]string{"multiWild", "foobazbar"}, 0},
		{[]string{"nestedWild", "val1", "wild", "goober"}, 20},
		{[]string{"nestedWild", "val1", "wild", "foo"}, 0},
	} {
		r, _ := d.match(descriptor(tc.entries...), nil)
		if tc.perUnit == 0 {
			assert.Nil(t, r, "%v", tc.entries)
		} else if assert.NotNil(t, r, "%v", tc.entries) {
			assert.Equal(t, tc.perUnit, r.perUnit, "%v", tc.entries)
		}
	}
}

// TestMatchFirstWildcardWins: of two wildcards that match, the first in the
// file decides; an exact value beats both.
func TestMatchFirstWildcardWins(t *testing.T) {
	f, err := LoadFiles([]string{writeFile(t, "w.yaml", `domain: d
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/v1*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1/x
    rate_limit: {unit: second, requests_per_unit: 3}
`)})
	require.NoError(t, err)
	d := f.domains["d"]
	r, _ := d.match(descriptor("path", "/api/v1/y"), nil)
	assert.Equal(t, uint32(1), r.perUnit)
	r, _ = d.match(descriptor("path", "/api/v1/x"), nil)
	assert.Equal(t, uint32(3), r.perUnit)
}

// TestCounterKeysDoNotCollide: envoyproxy/ratelimit's (a, b_c) and (a_b, c)
// share a counter; here they do not, nor do a descriptor's own limits, nor
// a budget's over-limit marker with a descriptor's budget.
func TestCounterKeysDoNotCollide(t *testing.T) {
	sec := &rule{unit: rlsv3.RateLimitResponse_RateLimit_SECOND, perUnit: 5}
	a := counterKey("d", sec, descriptor("a", "b_c"), []string{"b_c"})
	b := counterKey("d", sec, descriptor("a_b", "c"), []string{"c"})
	assert.NotEqual(t, string(a), string(b))
	c := counterKey("d", sec, descriptor("a", "1:b"), []string{"1:b"})
	e := counterKey("d", sec, descriptor("a", "1", "b", ""), []string{"1", ""})
	assert.NotEqual(t, string(c), string(e))
	own := &rule{unit: sec.unit, perUnit: 5, override: true}
	other := &rule{unit: sec.unit, perUnit: 6, override: true}
	o5 := counterKey("d", own, descriptor("a", "x"), []string{"x"})
	assert.NotEqual(t, string(o5), string(counterKey("d", sec, descriptor("a", "x"), []string{"x"})))
	assert.NotEqual(t, string(o5), string(counterKey("d", other, descriptor("a", "x"), []string{"x"})))
	m := overKey(counterKey("d", sec, descriptor("a", "x"), []string{"x"}))
	assert.NotEqual(t, string(m), string(counterKey("d", sec, descriptor("a", "x", "1", "!"), []string{"x", "!"})))
}
