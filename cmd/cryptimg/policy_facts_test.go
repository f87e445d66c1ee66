package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sourceFile is one parsed non-test Go file of the module.
type sourceFile struct {
	rel  string // slash path from the module root
	pkg  string
	file *ast.File
}

// moduleSources parses the non-test Go files of the packages that state
// policy: the CLI, header, image and sectors, and essiv.
func moduleSources(t *testing.T) []sourceFile {
	t.Helper()
	root := filepath.Join("..", "..")
	var out []sourceFile
	fset := token.NewFileSet()
	for _, dir := range []string{"cmd", "header", "image", "sectors", "essiv"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out = append(out, sourceFile{filepath.ToSlash(rel), f.Name.Name, f})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 50 {
		t.Fatalf("found only %d source files", len(out))
	}
	return out
}

// TestPolicyFactsStatedOnce: each policy fact of issue 29 is stated in one
// place, and the CLI restates none of them in its checks or help but asks
// package header (or the cipher registry, or image for the qcow2 rule).
// The facts: the defaults per LUKS version, the encryption sector sizes and
// the 512-byte unit, the key slot ranges, the hashes and KDFs, and that
// qcow2 carries LUKS1 only.
func TestPolicyFactsStatedOnce(t *testing.T) {
	// Constants of value 512, by package.name. Each is the one statement
	// of its fact; a new one must say why it cannot use these.
	unitOK := map[string]string{
		"cipher.UnitSize":       "the 512-byte IV unit and smallest sector",
		"sectors.UnitSize":      "the pipeline's sector numbering; sectors imports nothing, by design",
		"integrity.sectorBytes": "dm-integrity's own on-disk unit; image/integrity imports nothing",
		"header.MaxKeyBytes":    "another fact: the largest LUKS2 key",
		"derive.MaxKeyBytes":    "another fact: the largest derived key",
		"image.stateSize":       "another fact: the journal state record",
		"verity.SuperblockSize": "another fact: veritysetup's superblock",
		"verity.minBlockSize":   "another fact: the smallest dm-verity block (the kernel's, not a LUKS sector)",
	}
	// Substrings of CLI string literals that restate a fact.
	cliPhrases := []string{"0-7", "0-31", "sha1, sha256", "argon2id, argon2i", "argon2id (default)", "512, 1024", "LUKS1 only"}
	// CLI string literals that are a fact's value.
	cliValues := map[string]bool{
		"aes-cbc-essiv:sha256": true, "aes-xts-plain64": true,
		"pbkdf2": true, "argon2i": true, "argon2id": true,
		"sha1": true, "sha256": true, "sha512": true,
	}
	// CLI files whose numbers are not policy: benchmark measures fixed
	// sizes; the key file buffer and FUSE's st_blocks (POSIX's 512-byte
	// blocks) are other facts.
	cliNumbersOK := map[string]bool{
		"cmd/cryptimg/cmd_benchmark.go":   true,
		"cmd/cryptimg/secrets.go":         true,
		"cmd/cryptimg/open_fuse_linux.go": true,
	}

	for _, sf := range moduleSources(t) {
		cli := strings.HasPrefix(sf.rel, "cmd/")
		ast.Inspect(sf.file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				if n.Tok != token.CONST {
					break
				}
				for _, spec := range n.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Value == "512" {
							name := sf.pkg + "." + vs.Names[i].Name
							if _, ok := unitOK[name]; !ok {
								t.Errorf("%s: %s = 512 defines the 512-byte unit again; use cipher.UnitSize (or header.SectorSize, image.SectorSize)", sf.rel, name)
							}
						}
					}
				}
			case *ast.BinaryExpr:
				// The sector-size set: x&(x-1) != 0 belongs to
				// cipher.ValidSectorSize (and qcow2's cluster size and dm-verity's
				// block sizes, other facts).
				if n.Op == token.AND && sf.rel != "header/cipher/cipher.go" && sf.rel != "image/qcow2/writer.go" && sf.rel != "image/verity/verity.go" {
					if p, ok := n.Y.(*ast.ParenExpr); ok {
						if b, ok := p.X.(*ast.BinaryExpr); ok && b.Op == token.SUB && types.ExprString(b.X) == types.ExprString(n.X) {
							if one, ok := b.Y.(*ast.BasicLit); ok && one.Value == "1" {
								t.Errorf("%s: a power-of-two sector size check; use cipher.ValidSectorSize", sf.rel)
							}
						}
					}
				}
				if lit, ok := n.Y.(*ast.BasicLit); ok && lit.Value == "4096" && (n.Op == token.GTR || n.Op == token.LEQ) {
					t.Errorf("%s: a bound of 4096 on a sector size; use cipher.ValidSectorSize or header.SectorSizes", sf.rel)
				}
			case *ast.ReturnStmt:
				for _, r := range n.Results {
					if isIdent(r, "ErrLUKS2Qcow2") && sf.rel != "image/image.go" {
						t.Errorf("%s: returns ErrLUKS2Qcow2 itself; ask Format.CarriesVersion", sf.rel)
					}
				}
			case *ast.BasicLit:
				if !cli {
					break
				}
				switch n.Kind {
				case token.STRING:
					s, err := strconv.Unquote(n.Value)
					if err != nil {
						break
					}
					if cliValues[s] && sf.rel != "cmd/cryptimg/cmd_benchmark.go" {
						t.Errorf("%s: the literal %q restates a header fact; use header's (DefaultCipher, KDFs, Hashes, Versions)", sf.rel, s)
					}
					for _, p := range cliPhrases {
						if strings.Contains(s, p) {
							t.Errorf("%s: %q restates a fact (%q); build it from header's", sf.rel, firstLine(s), p)
						}
					}
				case token.INT:
					if (n.Value == "512" || n.Value == "4096") && !cliNumbersOK[sf.rel] {
						t.Errorf("%s: the number %s in the CLI; use image.SectorSize, header.SectorSizes or cipher.MaxSectorSize", sf.rel, n.Value)
					}
				}
			}
			return true
		})
	}
}

// isIdent reports whether e is the identifier name or pkg.name.
func isIdent(e ast.Expr, name string) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == name
	case *ast.SelectorExpr:
		return e.Sel.Name == name
	}
	return false
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + "…"
	}
	return s
}
