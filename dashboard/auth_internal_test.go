package dashboard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFormTokenOK: a cancel or rerun form's token is the viewer's own,
// compared in constant time (hmac.Equal); another viewer's token, a
// token one byte off, a prefix and an empty token are refused.
func TestFormTokenOK(t *testing.T) {
	d := &Dashboard{}
	copy(d.secret[:], "a secret of the dashboard's own.")
	alice, bob := Viewer{Name: "alice", Owner: "user:alice", CanCancel: true}, Viewer{Name: "bob", Owner: "user:bob", CanCancel: true}
	tok := d.csrfToken(alice)
	require.True(t, d.formTokenOK(alice, tok))
	off := []byte(tok)
	off[len(off)-1] ^= 1
	for _, bad := range []string{"", d.csrfToken(bob), string(off), tok[:len(tok)-1], tok + "x"} {
		require.False(t, d.formTokenOK(alice, bad), "%q", bad)
	}
}

// TestFormTokensComparedOnce: every form of the dashboard (cancel, rerun,
// pause, resume, the schedules' pause, resume and trigger) checks its
// token with formTokenOK, so in constant time: outside formTokenOK,
// csrfToken only fills a page's form, and no "csrf" form value is
// compared with == or != anywhere in the package.
func TestFormTokensComparedOnce(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	names := func(e ast.Expr) string {
		var found []string
		ast.Inspect(e, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				found = append(found, x.Sel.Name)
			case *ast.BasicLit:
				found = append(found, x.Value)
			}
			return true
		})
		return strings.Join(found, " ")
	}
	checked := 0
	for _, pkg := range pkgs {
		for fname, f := range pkg.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Name.Name == "formTokenOK" {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					b, ok := n.(*ast.BinaryExpr)
					if !ok || b.Op != token.EQL && b.Op != token.NEQ {
						return true
					}
					for _, side := range []ast.Expr{b.X, b.Y} {
						s := names(side)
						require.False(t, strings.Contains(s, "csrfToken") || strings.Contains(s, `"csrf"`),
							"%s: %s compares a form token with %s: use formTokenOK", fname, fn.Name.Name, b.Op)
					}
					return true
				})
				ast.Inspect(fn, func(n ast.Node) bool {
					if c, ok := n.(*ast.CallExpr); ok && (strings.Contains(names(c.Fun), "formTokenOK") || strings.Contains(names(c.Fun), "checkForm")) {
						checked++
					}
					return true
				})
			}
		}
	}
	require.GreaterOrEqual(t, checked, 3, "the cancel, rerun and ops forms check their token (checkForm, which calls formTokenOK)")
}
