package house

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function declaration of the module may
// span, from its func keyword to its closing brace.
const maxFuncLines = 80

// longFuncs are the functions allowed past maxFuncLines, by "path Name"
// (path from the module root; Name is Type.Method for a method), each with
// the reason it is not split yet. An entry that no longer names a function
// past the limit fails the test, so the list only shrinks.
var longFuncs = map[string]string{}

// Every function of the module (tests aside) spans at most maxFuncLines
// lines, except those longFuncs lists.
func TestFunctionsAreShort(t *testing.T) {
	root := moduleRoot(t)
	long := map[string]int{}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(path, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return funcLengths(path, func(name string, lines int) {
			if lines > maxFuncLines {
				long[filepath.ToSlash(rel)+" "+name] = lines
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("parsed only %d files under %s: the walk missed the module", files, root)
	}
	for _, key := range slices.Sorted(maps.Keys(long)) {
		if _, ok := longFuncs[key]; !ok {
			t.Errorf("%s is %d lines, over %d: split it into well-named pieces", key, long[key], maxFuncLines)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(longFuncs)) {
		if _, ok := long[key]; !ok {
			t.Errorf("longFuncs lists %q, which is gone or at most %d lines now: remove the entry", key, maxFuncLines)
		}
	}
}

// moduleRoot is the directory of the module's go.mod, two levels up.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the module root %s: %v", root, err)
	}
	return root
}

// skipDir reports whether the go command leaves the directory out of the
// module: hidden and underscore directories, testdata, and nested modules.
func skipDir(path, name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil
}

// funcLengths calls found with the name and line span of every function
// declared in the Go file at path.
func funcLengths(path string, found func(name string, lines int)) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
		found(funcName(fn), lines)
	}
	return nil
}

// funcName is fn's name, as Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return fmt.Sprintf("%s.%s", recvType(fn.Recv.List[0].Type), fn.Name.Name)
}

// recvType is the name of a receiver's type, without pointer or type
// parameters.
func recvType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvType(x.X)
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}
