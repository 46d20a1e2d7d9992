// Package apicheck records the module's public surface: the exported names
// of every library package (what a user imports: not cmd/, examples/,
// bench/, integration/ nor an internal/ package), one line per name with
// its signature, in the checked-in files under api/ at the module root,
// one file per package (api/workflow.txt, api/store/memory.txt, ...), in
// the spirit of Go's own api/ files.
//
// Its test regenerates the lines from the code and fails when a file and
// the code disagree, printing the difference and the command that updates
// the files:
//
//	go test ./internal/apicheck -update
//
// so that every export added, changed or removed is a reviewed line in a
// diff. The lines are read from the packages' compiled export data (go
// list -export), with go/types and go/importer only.
//
// The line forms, sorted within a file:
//
//	const Name Type = value
//	var Name Type
//	func Name(params) results
//	method (Recv) Name(params) results
//	type Name struct
//	type Name struct, Field Type
//	type Name struct, embedded Type
//	type Name interface { M1, M2 }
//	type Name interface, M1(params) results
//	type Name underlying
//	type Name = Aliased
package apicheck

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Module is the module whose library packages are recorded.
const Module = "github.com/taskbridge/taskbridge"

// Library reports whether importPath is a library package of the module:
// one a user imports. Commands, examples, the benchmarks, the integration
// tests and internal packages are not.
func Library(importPath string) bool {
	rel, ok := strings.CutPrefix(importPath, Module)
	if !ok || (rel != "" && rel[0] != '/') {
		return false
	}
	rel = strings.TrimPrefix(rel, "/")
	first, _, _ := strings.Cut(rel, "/")
	switch first {
	case "cmd", "examples", "bench", "integration", "internal":
		return false
	}
	return !slices.Contains(strings.Split(rel, "/"), "internal")
}

// File is the path, relative to the module root, of the file recording
// importPath's surface: api/<path in the module>.txt (api/root.txt for
// the module's root package).
func File(importPath string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(importPath, Module), "/")
	if rel == "" {
		rel = "root"
	}
	return "api/" + rel + ".txt"
}

// Package is one library package: its import path and directory.
type Package struct {
	ImportPath string
	Dir        string
}

// Surface is the recorded surface of the module's library packages.
type Surface struct {
	// Packages are the library packages, sorted by import path.
	Packages []Package
	// Lines maps each library package's import path to its API lines,
	// sorted.
	Lines map[string][]string
}

// Load lists the module's packages from root (the module's directory)
// with the go command, and reads every library package's surface from
// its export data.
func Load(ctx context.Context, root string) (*Surface, error) {
	out, err := goList(ctx, root, "-f", "{{.ImportPath}}\t{{.Dir}}", "./...")
	if err != nil {
		return nil, err
	}
	s := &Surface{Lines: map[string][]string{}}
	var paths []string
	for line := range strings.Lines(out) {
		path, dir, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && Library(path) {
			s.Packages = append(s.Packages, Package{ImportPath: path, Dir: dir})
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("apicheck: no library package under %s", root)
	}
	slices.SortFunc(s.Packages, func(a, b Package) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	// The export data of the library packages and everything they import.
	out, err = goList(ctx, root, append([]string{"-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for line := range strings.Lines(out) {
		path, file, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && file != "" {
			exports[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("apicheck: no export data for %s", path)
		}
		return openFile(file)
	})
	for _, p := range s.Packages {
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			return nil, fmt.Errorf("apicheck: reading %s: %w", p.ImportPath, err)
		}
		s.Lines[p.ImportPath] = Lines(pkg)
	}
	return s, nil
}

// goList runs go list in dir and returns its standard output.
func goList(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("apicheck: go list %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out), nil
}

// Lines returns the API lines of pkg, sorted: one per exported constant,
// variable, function, type, method of an exported type, field of an
// exported struct type and method of an exported interface type.
func Lines(pkg *types.Package) []string {
	q := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	str := func(t types.Type) string { return types.TypeString(t, q) }
	sig := func(s *types.Signature) string {
		var b bytes.Buffer
		types.WriteSignature(&b, s, q)
		return b.String()
	}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			if b, ok := obj.Type().(*types.Basic); ok && b.Info()&types.IsUntyped != 0 {
				add("const %s = %s", name, obj.Val().ExactString())
			} else {
				add("const %s %s = %s", name, str(obj.Type()), obj.Val().ExactString())
			}
		case *types.Var:
			add("var %s %s", name, str(obj.Type()))
		case *types.Func:
			add("func %s%s", name, sig(obj.Type().(*types.Signature)))
		case *types.TypeName:
			typeLines(obj, str, sig, add)
		}
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// typeLines adds the lines of the exported type obj: its own, its
// exported fields or interface methods, and its exported methods.
func typeLines(obj *types.TypeName, str func(types.Type) string, sig func(*types.Signature) string, add func(string, ...any)) {
	name := obj.Name()
	if obj.IsAlias() {
		add("type %s = %s", name, str(types.Unalias(obj.Type())))
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		add("type %s %s", name, str(obj.Type().Underlying()))
		return
	}
	head, recv := name, name
	if tps := named.TypeParams(); tps.Len() > 0 {
		var params, args []string
		for tp := range tps.TypeParams() {
			params = append(params, tp.Obj().Name()+" "+str(tp.Constraint()))
			args = append(args, tp.Obj().Name())
		}
		head += "[" + strings.Join(params, ", ") + "]"
		recv += "[" + strings.Join(args, ", ") + "]"
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add("type %s struct", head)
		for f := range u.Fields() {
			switch {
			case f.Embedded():
				add("type %s struct, embedded %s", name, str(f.Type()))
			case f.Exported():
				add("type %s struct, %s %s", name, f.Name(), str(f.Type()))
			}
		}
	case *types.Interface:
		if !u.IsMethodSet() {
			add("type %s %s", head, str(u))
			break
		}
		var names []string
		unexported := false
		for m := range u.Methods() {
			if !m.Exported() {
				unexported = true
				continue
			}
			names = append(names, m.Name())
			add("type %s interface, %s%s", name, m.Name(), sig(m.Type().(*types.Signature)))
		}
		if unexported {
			names = append(names, "unexported methods")
		}
		if len(names) == 0 {
			add("type %s interface {}", head)
		} else {
			add("type %s interface { %s }", head, strings.Join(names, ", "))
		}
	default:
		add("type %s %s", head, str(u))
	}
	for m := range named.Methods() {
		if !m.Exported() {
			continue
		}
		r := recv
		if _, ptr := m.Type().(*types.Signature).Recv().Type().(*types.Pointer); ptr {
			r = "*" + r
		}
		add("method (%s) %s%s", r, m.Name(), sig(m.Type().(*types.Signature)))
	}
}

// openFile opens an export data file.
func openFile(name string) (io.ReadCloser, error) { return os.Open(name) }

// Deprecated returns the exported names of the package in dir whose doc
// comment (or whose declaration group's) has a paragraph starting
// "Deprecated:", as "file: name" (a method as "Type.Method", a field as
// "Type.Field"), sorted. Test files are not read.
func Deprecated(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var found []string
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("apicheck: %w", err)
		}
		base := filepath.Base(file)
		note := func(doc *ast.CommentGroup, name string) {
			if deprecated(doc) {
				found = append(found, base+": "+name)
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					recv := recvName(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					name = recv + "." + name
				}
				note(d.Doc, name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								note(firstDoc(s.Doc, d.Doc), n.Name)
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						note(firstDoc(s.Doc, d.Doc), s.Name.Name)
						var fields *ast.FieldList
						switch t := s.Type.(type) {
						case *ast.StructType:
							fields = t.Fields
						case *ast.InterfaceType:
							fields = t.Methods
						}
						if fields == nil {
							continue
						}
						for _, fl := range fields.List {
							for _, n := range fl.Names {
								if n.IsExported() {
									note(fl.Doc, s.Name.Name+"."+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(found)
	return slices.Compact(found), nil
}

// firstDoc returns doc, or the group's doc when doc says nothing
// deprecated (a group's Deprecated: covers its members).
func firstDoc(doc, group *ast.CommentGroup) *ast.CommentGroup {
	if deprecated(doc) {
		return doc
	}
	return group
}

// deprecated reports whether doc has a paragraph starting "Deprecated:".
func deprecated(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for para := range strings.SplitSeq(doc.Text(), "\n\n") {
		if strings.HasPrefix(strings.TrimSpace(para), "Deprecated:") {
			return true
		}
	}
	return false
}

// recvName is the name of a method's receiver type.
func recvName(t ast.Expr) string {
	switch t := t.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}
