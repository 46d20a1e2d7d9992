package apicheck

import (
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the api/ files from the code")

// updateCommand is the command that rewrites the api/ files.
const updateCommand = "go test ./internal/apicheck -update"

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

// TestAPI checks that the api/ files record the library packages' exported
// surface exactly: a line for every exported name, none for a name that
// is gone, no file for a package that is gone. With -update it rewrites
// them.
func TestAPI(t *testing.T) {
	root := moduleRoot(t)
	s, err := Load(context.Background(), root)
	require.NoError(t, err)

	want := map[string]string{} // file → content
	total := 0
	for _, p := range s.Packages {
		lines := s.Lines[p.ImportPath]
		want[File(p.ImportPath)] = strings.Join(lines, "\n") + "\n"
		total += len(lines)
		t.Logf("%-50s %4d lines, %4d top-level names", p.ImportPath, len(lines), topLevel(lines))
	}
	t.Logf("%d library packages, %d lines", len(s.Packages), total)

	var have []string
	err = filepath.WalkDir(filepath.Join(root, "api"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".txt" {
			return err
		}
		rel, err := filepath.Rel(root, path)
		have = append(have, filepath.ToSlash(rel))
		return err
	})
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}

	var problems []string
	for _, file := range have {
		if _, ok := want[file]; ok {
			continue
		}
		if *update {
			require.NoError(t, os.Remove(filepath.Join(root, file)))
			continue
		}
		problems = append(problems, fmt.Sprintf("%s records no library package: remove it", file))
	}
	files := slices.Sorted(func(yield func(string) bool) {
		for f := range want {
			if !yield(f) {
				return
			}
		}
	})
	for _, file := range files {
		path := filepath.Join(root, filepath.FromSlash(file))
		got, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		if string(got) == want[file] {
			continue
		}
		if *update {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(want[file]), 0o644))
			t.Logf("updated %s", file)
			continue
		}
		problems = append(problems, file+" and the code disagree (- in the file only, + in the code only):\n"+
			lineDiff(strings.Split(strings.TrimSuffix(string(got), "\n"), "\n"), strings.Split(strings.TrimSuffix(want[file], "\n"), "\n")))
	}
	if len(problems) > 0 {
		t.Fatalf("the recorded public surface (api/) is not the code's:\n\n%s\n\nIf the change is meant, run\n\n\t%s\n\nand commit the api/ files: every new export is a reviewed line in their diff.",
			strings.Join(problems, "\n\n"), updateCommand)
	}
}

// topLevel counts the lines that declare a package-level name (not a
// method, a field or an interface's method).
func topLevel(lines []string) int {
	n := 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "method ") && !strings.Contains(l, " struct, ") && !strings.Contains(l, " interface, ") {
			n++
		}
	}
	return n
}

// lineDiff lists the lines of a (sorted) only in a as "- line", and of b
// (sorted) only in b as "+ line".
func lineDiff(a, b []string) string {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			if x != "" {
				m[x] = true
			}
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, x := range a {
		if x != "" && !inb[x] {
			out = append(out, "\t- "+x)
		}
	}
	for _, x := range b {
		if x != "" && !ina[x] {
			out = append(out, "\t+ "+x)
		}
	}
	if len(out) == 0 {
		return "\t(same lines, different order or spacing)"
	}
	return strings.Join(out, "\n")
}

// The line forms, on a package written for the purpose.
const fixture = `package fix

import "context"

// Deprecated: a whole group.
const (
	A Kind = iota
	B
)

const Untyped = "x" + "y"
const unexported = 1

var ErrGone = context.Canceled

type Kind int

func (k Kind) String() string { return "" }
func (k *Kind) Set(s string) error { return nil }
func (k Kind) hidden() {}

type Options struct {
	// Deprecated: use Other.
	Old     string
	Timeout func(context.Context) error
	hidden  int
	Embedded
}

type Embedded struct{}

type Reader interface {
	Read(p []byte) (int, error)
	close()
}

type Empty interface{}

type Number interface{ ~int | ~float64 }

type Set[T comparable] struct{ M map[T]bool }

func (s *Set[T]) Add(v T) {}

func Map[T, U any](xs []T, f func(T) U) []U { return nil }

type Alias = Options

// Do does.
//
// Deprecated: use Map.
func Do() {}
`

func TestLineForms(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "fix.go", fixture, parser.ParseComments)
	require.NoError(t, err)
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("example.com/fix", fset, []*ast.File{f}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		"const A Kind = 0",
		"const B Kind = 1",
		`const Untyped = "xy"`,
		"func Do()",
		"func Map[T, U any](xs []T, f func(T) U) []U",
		"method (*Kind) Set(s string) error",
		"method (*Set[T]) Add(v T)",
		"method (Kind) String() string",
		"type Alias = Options",
		"type Embedded struct",
		"type Empty interface {}",
		"type Kind int",
		"type Number interface{~int | ~float64}",
		"type Options struct",
		"type Options struct, Old string",
		"type Options struct, Timeout func(context.Context) error",
		"type Options struct, embedded Embedded",
		"type Reader interface { Read, unexported methods }",
		"type Reader interface, Read(p []byte) (int, error)",
		"type Set struct, M map[T]bool",
		"type Set[T comparable] struct",
		"var ErrGone error",
	}, Lines(pkg))

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fix.go"), []byte(fixture), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fix_test.go"), []byte("package fix\n\n// Deprecated: tests are not read.\nfunc Old() {}\n"), 0o644))
	names, err := Deprecated(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"fix.go: A", "fix.go: B", "fix.go: Do", "fix.go: Options.Old"}, names)
}

func TestLibrary(t *testing.T) {
	for path, want := range map[string]bool{
		Module + "/workflow":                    true,
		Module + "/store/memory":                true,
		Module + "/store/storetest":             true,
		Module + "/cmd/taskbridge":              false,
		Module + "/examples/62_tasks_workflow":  false,
		Module + "/bench":                       false,
		Module + "/integration":                 false,
		Module + "/internal/apicheck":           false,
		Module + "/taskrouter/internal/service": false,
		Module + "x/workflow":                   false,
		"example.com/other":                     false,
	} {
		require.Equal(t, want, Library(path), path)
	}
	require.Equal(t, "api/store/memory.txt", File(Module+"/store/memory"))
}
