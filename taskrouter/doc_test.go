package taskrouter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/taskbridge/taskbridge/internal/tests/doctest"
)

// TestDocFileMap: doc.go's "# Files" section names every file of the
// package (tests aside), and every file it names exists; package
// internal/wire's doc.go does the same for its files.
func TestDocFileMap(t *testing.T) {
	for _, dir := range []string{".", "internal/wire"} {
		t.Run(dir, func(t *testing.T) { doctest.FileMap(t, dir) })
	}
}

// parsePackage parses the package's non-test files, by name.
func parsePackage(t *testing.T) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		require.NoError(t, err)
		files[n] = f
	}
	return files
}

// receiverType is the name of fd's receiver type, "" for a function.
func receiverType(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return ""
	}
	x := fd.Recv.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// TestDocLockRule keeps doc.go's lock rule ("# State") true where the
// code can show it: the Router has no lock, so no Router method takes
// one (a part's lock is taken in the part's methods); and no lock is
// reached through a field's field (a.part.mu.Lock()): a method takes its
// own type's lock, or that of a value it holds in a variable, never the
// lock of a part it reaches into.
func TestDocLockRule(t *testing.T) {
	for _, f := range parsePackage(t) {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Lock" && sel.Sel.Name != "RLock") {
					return true
				}
				require.NotEqual(t, "Router", receiverType(fd), "Router.%s takes a lock: the Router has none; take it in the part's own method", fd.Name.Name)
				if mu, ok := sel.X.(*ast.SelectorExpr); ok {
					_, chained := mu.X.(*ast.SelectorExpr)
					require.False(t, chained, "%s.%s locks %s: another part's lock, taken through its field; give the part a method that takes its own lock", receiverType(fd), fd.Name.Name, types.ExprString(sel.X))
				}
				return true
			})
		}
	}
}

// routerHolders are the types that may hold the *Router: its own serving
// of the dialects (the shims and the fast path) and a handler run, the
// engine's record of work running here. Features and background services
// see narrow interfaces of the engine instead (doc.go, "Background work").
var routerHolders = map[string]bool{"fastPath": true, "httpShim": true, "pushConn": true, "taskTransport": true, "run": true}

// TestDocNoServiceHoldsTheRouter: no type but routerHolders has a
// *Router field.
func TestDocNoServiceHoldsTheRouter(t *testing.T) {
	for _, f := range parsePackage(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				if types.ExprString(fl.Type) == "*Router" {
					require.True(t, routerHolders[ts.Name.Name], "%s holds the *Router: give it a narrow interface of what it needs of the engine", ts.Name.Name)
				}
			}
			return true
		})
	}
}

// TestDocRouterFiles: the files doc.go's "# Files" says hold the Router's
// own methods are exactly the files that do, and the Router has no more
// methods than its budget (run with -v for the count).
func TestDocRouterFiles(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(doc), "\n//", " ")), " ")
	_, after, ok := strings.Cut(text, "The Router's own methods")
	require.True(t, ok, "doc.go says where the Router's own methods are")
	named, _, ok := strings.Cut(after, "; every other file")
	require.True(t, ok)
	want := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b([a-z0-9_]+\.go)\b`).FindAllStringSubmatch(named, -1) {
		want[m[1]] = true
	}
	have := map[string]bool{}
	methods, exported := 0, 0
	for name, f := range parsePackage(t) {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && receiverType(fd) == "Router" {
				have[name] = true
				methods++
				if fd.Name.IsExported() {
					exported++
				}
			}
		}
	}
	require.Equal(t, want, have, "doc.go names the files of the Router's methods")
	t.Logf("Router: %d methods (%d exported) in %d files", methods, exported, len(have))
	// A ratchet: lower it when a method leaves the Router; a feature
	// that needs a new one is a type of its own behind a handle instead.
	require.LessOrEqual(t, methods, routerMethodBudget, "the Router keeps the engine: give a feature a type of its own (doc.go, # Files)")
}

// routerMethodBudget is the most methods the Router may have (156 before
// issue 42 moved the features behind their handles, 76 before the engine's
// own parts left it: recovery, the door, the fanout).
const routerMethodBudget = 60
