package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocCommentsNameTheirIdentifier walks every non-test Go file of the
// module and checks Go's doc comment convention, so that a comment moved,
// renamed or left above the wrong declaration shows up:
//
//   - a package doc comment begins "Package NAME", or "Command NAME" for a
//     main package (NAME its directory, or the file for a `go run FILE`
//     generator);
//   - a doc comment on an exported function, method (of an exported type),
//     type, constant or variable begins with that identifier's name; a
//     type's may begin "A NAME", "An NAME" or "The NAME";
//   - a doc comment on any declaration, exported or not, does not begin with
//     the name of another top-level identifier of its package (the comment of
//     one declaration attached to the next), nor with a word that can only be
//     an identifier (lowerCamelCase: a name changed and its comment not);
//     nor, for a function, with another name its package uses.
//
// A parenthesised group's own comment describes the group and is not
// checked; the comment of a spec inside it is.
func TestDocCommentsNameTheirIdentifier(t *testing.T) {
	for _, hit := range docCommentHits(t, "../..") {
		t.Error(hit)
	}
}

// TestDocsCiteRepoFiles: every Markdown file that a Go source (tests
// included), a script or a Markdown file of the module names exists in the
// repository, beside the file that names it or from the module root: the
// docs cite only what a reader of the repository has.
func TestDocsCiteRepoFiles(t *testing.T) {
	root := "../.."
	cite := regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == ".git" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			for _, loc := range cite.FindAllStringIndex(line, -1) {
				ref := line[loc[0]:loc[1]]
				// A URL names a file elsewhere on purpose.
				token := line[strings.LastIndexAny(line[:loc[0]], " \t(<[`\"")+1 : loc[1]]
				if strings.Contains(token, "://") {
					continue
				}
				if !exists(filepath.Join(filepath.Dir(path), ref)) && !exists(filepath.Join(root, ref)) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d: cites %s, which is not in the repository", rel, i+1, ref)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("read only %d files under %s", n, root)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// docCommentHits returns one line per doc comment of the module under root
// that breaks the rules of TestDocCommentsNameTheirIdentifier.
func docCommentHits(t *testing.T, root string) []string {
	t.Helper()
	fset := token.NewFileSet()
	// Files by directory: a package's top-level names span its files.
	dirs := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// The go tool ignores these, and so does the convention.
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found Go files in only %d directories under %s; is the walk in the module root?", len(dirs), root)
	}
	var hits []string
	report := func(pos token.Pos, format string, args ...any) {
		p := fset.Position(pos)
		rel, err := filepath.Rel(root, p.Filename)
		if err != nil {
			rel = p.Filename
		}
		hits = append(hits, fmt.Sprintf("%s:%d: ", rel, p.Line)+fmt.Sprintf(format, args...))
	}
	for _, files := range dirs {
		// Top-level names of the package (per build tag both variants
		// declare the same names, which is harmless here).
		top := map[string]bool{}
		used := map[string]bool{} // every identifier the package's files use
		for _, f := range files {
			for _, d := range f.Decls {
				for _, n := range declNames(d) {
					top[n] = true
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					used[id.Name] = true
				}
				return true
			})
		}
		names := pkgNames{top: top, used: used}
		for _, f := range files {
			if f.Doc != nil {
				want := "Package " + f.Name.Name
				if f.Name.Name == "main" {
					want = "Command " + programName(fset, f)
				}
				if !strings.HasPrefix(f.Doc.Text(), want) {
					report(f.Doc.Pos(), "package doc comment begins %q, want %q", firstWords(f.Doc.Text(), 2), want)
				}
			}
			for _, d := range f.Decls {
				checkDecl(d, names, report)
			}
		}
	}
	slices.Sort(hits)
	return hits
}

// pkgNames are the names of one package: its top-level identifiers, and
// every identifier its files use (locals, fields and methods included).
type pkgNames struct{ top, used map[string]bool }

// checkDecl reports the doc comments of one top-level declaration that
// break the convention.
func checkDecl(d ast.Decl, top pkgNames, report func(token.Pos, string, ...any)) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		exported := d.Name.IsExported()
		if d.Recv != nil && len(d.Recv.List) > 0 {
			exported = exported && ast.IsExported(recvName(d.Recv.List[0].Type))
		}
		checkDoc(d.Doc, []string{d.Name.Name}, exported, false, true, top, report)
	case *ast.GenDecl:
		grouped := d.Lparen.IsValid()
		for _, s := range d.Specs {
			doc := d.Doc
			if grouped {
				doc = nil
			}
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Doc != nil {
					doc = s.Doc
				}
				checkDoc(doc, []string{s.Name.Name}, s.Name.IsExported(), true, false, top, report)
			case *ast.ValueSpec:
				if s.Doc != nil {
					doc = s.Doc
				}
				var names []string
				exported := false
				for _, n := range s.Names {
					if n.Name == "_" {
						continue
					}
					names = append(names, n.Name)
					exported = exported || n.IsExported()
				}
				if len(names) > 0 {
					checkDoc(doc, names, exported, false, false, top, report)
				}
			}
		}
	}
}

// lowerCamel matches a word that prose does not use but Go names do;
// lowerWord any word that could be an unexported Go name.
var (
	lowerCamel = regexp.MustCompile(`^[a-z]+[A-Z][A-Za-z0-9]*$`)
	lowerWord  = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
)

// checkDoc checks one doc comment against the names it documents.
func checkDoc(doc *ast.CommentGroup, names []string, exported, isType, isFunc bool, pkg pkgNames, report func(token.Pos, string, ...any)) {
	if doc == nil {
		return
	}
	text := doc.Text()
	words := strings.Fields(text)
	if len(words) == 0 {
		return
	}
	first := strings.TrimRight(words[0], ".,:;")
	if isType && len(words) > 1 && (first == "A" || first == "An" || first == "The") {
		first = strings.TrimRight(words[1], ".,:;")
	}
	// "Name's" and "Name(s)" still name it.
	first = strings.TrimSuffix(strings.TrimSuffix(first, "'s"), "(s)")
	if slices.Contains(names, first) {
		return
	}
	if exported {
		report(doc.Pos(), "doc comment of %s begins %q", strings.Join(names, ", "), firstWords(text, 3))
		return
	}
	switch {
	case pkg.top[first]:
		report(doc.Pos(), "doc comment of %s begins with another identifier of the package, %q", strings.Join(names, ", "), first)
	case lowerCamel.MatchString(first):
		report(doc.Pos(), "doc comment of %s begins with another identifier, %q", strings.Join(names, ", "), first)
	case isFunc && pkg.used[first] && lowerWord.MatchString(first):
		// A function's comment that opens with a name the package uses
		// (a field, a local) is one left from before a rename.
		report(doc.Pos(), "doc comment of %s begins with another identifier of the package, %q", strings.Join(names, ", "), first)
	}
}

// declNames lists the names a top-level declaration declares in its
// package's scope (methods declare none there).
func declNames(d ast.Decl) []string {
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil {
			names = append(names, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				names = append(names, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}

// programName is the name of the program a main package's file builds: its
// directory's, or the file's own for a "//go:build ignore" generator that is
// run with "go run FILE".
func programName(fset *token.FileSet, f *ast.File) string {
	path := fset.Position(f.Package).Filename
	for _, c := range f.Comments {
		if c.Pos() > f.Package {
			break
		}
		for _, l := range c.List {
			if l.Text == "//go:build ignore" {
				return strings.TrimSuffix(filepath.Base(path), ".go")
			}
		}
	}
	return filepath.Base(filepath.Dir(path))
}

// recvName is the base type name of a method receiver: T of T, *T, T[P]
// and *T[P].
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func firstWords(s string, n int) string {
	w := strings.Fields(s)
	return strings.Join(w[:min(n, len(w))], " ")
}
