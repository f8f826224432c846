package lua

import (
	"strings"
	"testing"
)

func TestCatalogScriptsEmbedded(t *testing.T) {
	for name, s := range map[string]string{
		"catalog_read":    CatalogRead,
		"catalog_write":   CatalogWrite,
		"catalog_restore": CatalogRestore,
		"catalog_changes": CatalogChanges,
	} {
		if !strings.HasPrefix(s, "-- "+name+":") {
			t.Errorf("%s.lua does not start with its header comment", name)
		}
		for _, word := range []string{"KEYS[1]", "ARGV[1]", "Returns"} {
			if !strings.Contains(s, word) {
				t.Errorf("%s.lua lacks %q", name, word)
			}
		}
	}
}
