package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The code's shape is kept by tests, not by memory: a package that grows
// past maxPackageLines is several subsystems in one, and a function past
// maxFunctionLines does several things a reader must hold at once.
const (
	maxPackageLines  = 2500
	maxFunctionLines = 60
)

func TestCodeShape(t *testing.T) {
	lines := map[string]int{} // package directory → non-test lines
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
		lines[filepath.Dir(path)] += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			assert.LessOrEqual(t, n, maxFunctionLines, "%s: func %s has %d lines: split it into named steps", path, fn.Name.Name, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, n := range lines {
		assert.LessOrEqual(t, n, maxPackageLines, "package %s has %d non-test lines: split it by what changes together", dir, n)
	}
	assert.Greater(t, len(lines), 10, "the walk found the packages")
}
