package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// manPageNames are the pages expected for cryptimg's command tree: the
// root's and one per command that --help lists, subcommands included.
func manPageNames() []string {
	names := []string{"cryptimg.1"}
	var walk func(prefix string, cmds []*cobra.Command)
	walk = func(prefix string, cmds []*cobra.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			names = append(names, prefix+"-"+c.Name()+".1")
			walk(prefix+"-"+c.Name(), c.Commands())
		}
	}
	walk("cryptimg", newRootCommand(&globalOptions{}).Commands())
	slices.Sort(names)
	return names
}

func generateMan(t *testing.T, epoch string) string {
	t.Helper()
	t.Setenv("SOURCE_DATE_EPOCH", epoch)
	dir := filepath.Join(t.TempDir(), "man1") // created by the command
	mustRun(t, "man", "--dir", dir)
	return dir
}

func TestManPages(t *testing.T) {
	dir := generateMan(t, "1700000000") // 2023-11-14 UTC
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := manPageNames()
	if !slices.Equal(got, want) {
		t.Fatalf("pages %q,\nwant %q", got, want)
	}
	for _, must := range []string{"cryptimg-encrypt.1", "cryptimg-completion.1", "cryptimg-version.1"} {
		if !slices.Contains(got, must) {
			t.Errorf("no %s", must)
		}
	}
	for _, name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// The page opens with .TH (after md2man's .nh, no hyphenation):
		// title, section 1, the date of SOURCE_DATE_EPOCH, source, manual.
		title := strings.ToUpper(strings.TrimSuffix(name, ".1"))
		head := `.nh` + "\n" + `.TH "` + title + `" "1" "Nov 2023" "cryptimg" "cryptimg manual"` + "\n"
		if !bytes.HasPrefix(b, []byte(head)) {
			first, _, _ := bytes.Cut(b, []byte("\n.SH"))
			t.Errorf("%s starts with %q, want %q", name, first, head)
		}
	}
	root, _ := os.ReadFile(filepath.Join(dir, "cryptimg.1"))
	for _, s := range []string{"--version", "--header", "EXIT STATUS", `\fBcryptimg-reencrypt(1)\fP`} {
		if !bytes.Contains(root, []byte(s)) {
			t.Errorf("cryptimg.1 lacks %q", s)
		}
	}
}

func TestManReproducible(t *testing.T) {
	a := generateMan(t, "1700000000")
	b := generateMan(t, "1700000000")
	c := generateMan(t, "1262304000") // 2010-01-01 UTC
	for _, name := range manPageNames() {
		pa, _ := os.ReadFile(filepath.Join(a, name))
		pb, _ := os.ReadFile(filepath.Join(b, name))
		pc, _ := os.ReadFile(filepath.Join(c, name))
		if !bytes.Equal(pa, pb) {
			t.Errorf("%s differs between two runs with the same SOURCE_DATE_EPOCH", name)
		}
		if !bytes.Contains(pc, []byte(`"1" "Jan 2010" "cryptimg"`)) {
			t.Errorf("%s is not dated Jan 2010 for SOURCE_DATE_EPOCH=1262304000", name)
		}
	}
}

func TestManUsage(t *testing.T) {
	expectCode(t, exitFailure, "man")
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	dir := filepath.Join(t.TempDir(), "man1")
	if r := expectCode(t, exitFailure, "man", "--dir", dir); !strings.Contains(r.stderr, "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: stderr %q", r.stderr)
	}
	if fileExists(dir) {
		t.Error("pages written despite the error")
	}
	if strings.Contains(mustRun(t, "--help").stdout, "  man ") {
		t.Error("--help lists the hidden man command")
	}
}

// ansi and overstrike are the terminal formatting that man and grotty add.
var (
	ansi       = regexp.MustCompile("\x1b\\[[0-9;]*m")
	overstrike = regexp.MustCompile(".\b")
)

func TestManRenders(t *testing.T) {
	dir := generateMan(t, "1700000000")
	page := filepath.Join(dir, "cryptimg-encrypt.1")
	var cmd *exec.Cmd
	if p, err := exec.LookPath("man"); err == nil {
		cmd = exec.Command(p, "-l", page)
		cmd.Env = append(os.Environ(), "MANWIDTH=100", "MANPAGER=cat", "PAGER=cat")
	} else if p, err := exec.LookPath("groff"); err == nil {
		cmd = exec.Command(p, "-man", "-Tutf8", page)
	} else {
		t.Skip("neither man (man-db) nor groff is installed; the pages are not rendered")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	text := overstrike.ReplaceAllString(ansi.ReplaceAllString(string(out), ""), "")
	// groff may render \- as a Unicode minus or hyphen.
	text = strings.NewReplacer("\u2212", "-", "\u2010", "-").Replace(text)
	for _, s := range []string{"CRYPTIMG-ENCRYPT(1)", "cryptimg manual", "SYNOPSIS", "cryptimg encrypt [flags] INPUT OUTPUT", "-d, --key-file", "OPTIONS INHERITED FROM PARENT COMMANDS", "--header"} {
		if !strings.Contains(text, s) {
			t.Errorf("%s renders without %q:\n%s", cmd, s, text)
		}
	}
	if strings.Contains(stderr.String(), "warning") {
		t.Errorf("%s warns: %s", cmd, stderr.String())
	}
}

func TestInstallManScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	if testing.Short() {
		t.Skip("builds cryptimg")
	}
	prefix := t.TempDir()
	cmd := exec.Command("bash", "../../scripts/install-man.sh", prefix)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install-man.sh: %v\n%s", err, out)
	}
	mandir := filepath.Join(prefix, "share", "man", "man1")
	for _, name := range manPageNames() {
		p := filepath.Join(mandir, name)
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("install-man.sh did not install %s: %v", name, err)
			continue
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644", name, st.Mode().Perm())
		}
		if !strings.Contains(string(out), p) {
			t.Errorf("install-man.sh does not say it installed %s:\n%s", p, out)
		}
	}
}
