package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxFunctionLines bounds a function: past it, a function does several
// things a reader must hold at once.
const maxFunctionLines = 60

const module = "github.com/sentinel-gateway/sentinel"

// sourceFiles calls visit with every non-test Go file of the repository
// (testdata and hidden folders left out), parsed with its body.
func sourceFiles(t *testing.T, visit func(path string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		visit(path, fset, f)
		return nil
	})
	require.NoError(t, err)
}

func TestCodeShape(t *testing.T) {
	files := 0
	sourceFiles(t, func(path string, fset *token.FileSet, f *ast.File) {
		files++
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			assert.LessOrEqual(t, n, maxFunctionLines, "%s: func %s has %d lines: split it into named steps", path, fn.Name.Name, n)
		}
	})
	assert.Greater(t, files, 100, "the walk found the sources")
}

// importRule forbids the packages under from (a folder of the repository,
// "." for the root alone) to import the packages under any of to, except
// those under allowed.
type importRule struct {
	why     string
	from    []string
	to      []string
	allowed []string // importers exempt from the rule
}

// featurePackages are the repository's packages that are not small shared
// pieces (internal/) nor tests.
var featurePackages = []string{".", "gateway", "proxy", "admin", "rls", "limit", "lua", "adaptive", "upstream", "cache", "reply", "docs", "loadtest", "bench"}

var importRules = []importRule{
	{why: "internal/ holds small shared pieces that import no feature package", from: []string{"internal"}, to: featurePackages},
	{why: "limit, adaptive and upstream import no serving package", from: []string{"limit", "adaptive", "upstream"}, to: []string{".", "gateway", "proxy", "admin", "rls"}},
	{why: "limit, adaptive and upstream do not import each other", from: []string{"limit"}, to: []string{"adaptive", "upstream"}},
	{why: "limit, adaptive and upstream do not import each other", from: []string{"adaptive"}, to: []string{"limit", "upstream"}},
	{why: "limit, adaptive and upstream do not import each other", from: []string{"upstream"}, to: []string{"limit", "adaptive"}},
	{why: "nothing but main and the tests imports the wiring", from: []string{""}, to: []string{"gateway"}, allowed: []string{".", "test"}},
	{why: "only the wiring imports the serving packages", from: []string{""}, to: []string{"proxy", "admin", "rls"}, allowed: []string{"gateway", "proxy", "admin", "rls", "test", "bench"}},
}

// under reports whether dir (a package folder, "." for the root) is the
// folder f or inside it ("" matches every folder; "." the root alone).
func under(dir, f string) bool {
	switch f {
	case "":
		return true
	case ".":
		return dir == "."
	}
	return dir == f || strings.HasPrefix(dir, f+"/")
}

func underAny(dir string, fs []string) bool {
	for _, f := range fs {
		if under(dir, f) {
			return true
		}
	}
	return false
}

// violations lists the imports of the package in dir that rules forbid.
func violations(dir string, imports []string, rules []importRule) []string {
	var out []string
	for _, imp := range imports {
		rel, ok := strings.CutPrefix(imp, module)
		if !ok {
			continue
		}
		target := strings.TrimPrefix(rel, "/")
		if target == "" {
			target = "."
		}
		for _, r := range rules {
			if underAny(dir, r.from) && !underAny(dir, r.allowed) && underAny(target, r.to) && !under(target, dir) {
				out = append(out, dir+" imports "+target+": "+r.why)
			}
		}
	}
	return out
}

// TestImportRules holds the dependencies to the directions the design
// states: main → gateway → {proxy, admin, rls} → {limit, adaptive,
// upstream, cache}, limit → lua, internal/ under everything.
func TestImportRules(t *testing.T) {
	imports := map[string][]string{} // package folder → its imports
	sourceFiles(t, func(path string, _ *token.FileSet, f *ast.File) {
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, s := range f.Imports {
			p, err := strconv.Unquote(s.Path.Value)
			require.NoError(t, err)
			imports[dir] = append(imports[dir], p)
		}
	})
	require.Contains(t, imports, "gateway")
	for dir, imps := range imports {
		for _, v := range violations(dir, imps, importRules) {
			t.Error(v)
		}
	}
}

// TestImportRulesCatchAForbiddenImport: the rules are not vacuous: each
// kind of forbidden import is reported.
func TestImportRulesCatchAForbiddenImport(t *testing.T) {
	for dir, imp := range map[string]string{
		"internal/logx":  module + "/limit",
		"limit/store":    module + "/proxy",
		"adaptive":       module + "/upstream",
		"upstream":       module + "/limit/catalog",
		"admin":          module + "/gateway",
		"limit":          module,
		"adaptive/inner": module + "/admin",
	} {
		assert.NotEmpty(t, violations(dir, []string{imp}, importRules), "%s importing %s", dir, imp)
	}
	assert.Empty(t, violations("gateway", []string{module + "/proxy", module + "/limit"}, importRules))
	assert.Empty(t, violations(".", []string{module + "/gateway"}, importRules))
	assert.Empty(t, violations("test/harness", []string{module + "/gateway"}, importRules))
}
