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
)

// visibleCommands are the names of the commands cryptimg --help lists.
func visibleCommands() []string {
	var names []string
	for _, c := range newRootCommand(&globalOptions{}).Commands() {
		if !c.Hidden {
			names = append(names, c.Name())
		}
	}
	return names
}

func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		for _, desc := range [][]string{nil, {"--no-descriptions"}} {
			args := append([]string{"completion", shell}, desc...)
			r := mustRun(t, args...)
			if len(r.stdout) < 500 {
				t.Fatalf("%s: %d bytes of script, want a whole script", strings.Join(args, " "), len(r.stdout))
			}
			// The scripts ask the binary for the candidates.
			if !strings.Contains(r.stdout, "cryptimg") || !strings.Contains(r.stdout, "__complete") {
				t.Errorf("%s: the script does not call cryptimg __complete", strings.Join(args, " "))
			}
			if desc != nil && !strings.Contains(r.stdout, "__completeNoDesc") {
				t.Errorf("%s: the script still asks for descriptions", strings.Join(args, " "))
			}
			if r.stderr != "" {
				t.Errorf("%s: stderr %q", strings.Join(args, " "), r.stderr)
			}
		}
	}
}

// completions runs the in-process half of every completion script:
// cryptimg __complete ARGS, one candidate per line, then a :DIRECTIVE line.
func completions(t *testing.T, args ...string) []string {
	t.Helper()
	r := mustRun(t, append([]string{"__complete"}, args...)...)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.HasPrefix(line, ":") {
			break
		}
		name, _, _ := strings.Cut(line, "\t")
		out = append(out, name)
	}
	return out
}

func TestCompletionNamesTheCommands(t *testing.T) {
	got := completions(t, "")
	want := visibleCommands()
	for _, name := range append(want, "reencrypt", "verify", "completion") {
		if !slices.Contains(got, name) {
			t.Errorf("completing an empty word: %q missing from %q", name, got)
		}
	}
	for _, hidden := range []string{"man", "__complete"} {
		if slices.Contains(got, hidden) {
			t.Errorf("completing an empty word offers the hidden %q", hidden)
		}
	}
	if got := completions(t, "ver"); !slices.Equal(got, []string{"verify", "verity", "version"}) {
		t.Errorf("completing ver: %q, want verify, verity and version", got)
	}
	if got := completions(t, "verity", ""); !slices.Equal(got, []string{"dump", "format", "verify"}) {
		t.Errorf("completing verity's subcommand: %q, want dump, format and verify", got)
	}
	if got := completions(t, "completion", ""); !slices.Equal(got, []string{"bash", "zsh", "fish", "powershell"}) {
		t.Errorf("completing completion's argument: %q", got)
	}
	if got := completions(t, "add-key", "--new-key-"); !slices.Contains(got, "--new-key-file") {
		t.Errorf("completing add-key --new-key-: %q, want --new-key-file", got)
	}
}

func TestCompletionUsage(t *testing.T) {
	for _, args := range [][]string{
		{"completion"},
		{"completion", "tcsh"},
		{"completion", "bash", "zsh"},
		{"completion", "--header", "x.hdr", "bash"},
	} {
		r := cryptimg(t, "", args...)
		if r.code != exitFailure || r.stdout != "" {
			t.Errorf("cryptimg %s: exit %d, stdout %d bytes; want exit 1 and no script", strings.Join(args, " "), r.code, len(r.stdout))
		}
		if !strings.HasPrefix(r.stderr, "cryptimg: error: ") {
			t.Errorf("cryptimg %s: stderr %q", strings.Join(args, " "), r.stderr)
		}
	}
	if r := cryptimg(t, "", "completion", "tcsh"); !strings.Contains(r.stderr, `"tcsh"`) || !strings.Contains(r.stderr, "fish") {
		t.Errorf("unknown shell: %q, want it named and the shells listed", r.stderr)
	}
	// Exactly one completion command, ours: cobra's default one has a
	// subcommand per shell.
	help := mustRun(t, "--help").stdout
	if n := len(regexp.MustCompile(`(?m)^  completion\s`).FindAllString(help, -1)); n != 1 {
		t.Errorf("--help lists %d completion commands, want 1", n)
	}
	if h := mustRun(t, "completion", "--help").stdout; strings.Contains(h, "Available Commands") || !strings.Contains(h, "--no-descriptions") {
		t.Errorf("completion --help is not cryptimg's completion command:\n%s", h)
	}
}

// writeScript writes cryptimg's completion script for shell to a file.
func writeScript(t *testing.T, shell string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cryptimg."+shell)
	if err := os.WriteFile(p, []byte(mustRun(t, "completion", shell).stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// getCompWordsStandIn replaces bash-completion's _get_comp_words_by_ref,
// which cobra's bash script needs, when that package is not installed. It
// does not split words at = or :, which the cases below do not need.
const getCompWordsStandIn = `
_get_comp_words_by_ref() {
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	words=("${COMP_WORDS[@]}")
	cword=$COMP_CWORD
}
`

func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	script := writeScript(t, "bash")
	sh(t, bash, "-n", script)
	out := sh(t, bash, "--norc", "--noprofile", "-c", `source "$1" && complete -p cryptimg`, "bash", script)
	if !regexp.MustCompile(`^complete .*-F __start_cryptimg cryptimg\n$`).MatchString(out) {
		t.Fatalf("complete -p cryptimg after sourcing the script: %q", out)
	}

	// Press Tab: the function registered for cryptimg runs the real binary
	// (__complete) and fills COMPREPLY.
	setup := getCompWordsStandIn
	if bc := "/usr/share/bash-completion/bash_completion"; fileExists(bc) {
		setup = "source " + bc
	} else {
		t.Log("bash-completion is not installed; using a stand-in for _get_comp_words_by_ref")
	}
	const tab = `
source "$1"
shift
COMP_WORDS=("$@")
COMP_CWORD=$(($# - 1))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
COLUMNS=80
fn=$(complete -p cryptimg | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
"$fn" cryptimg "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`
	bin := binary(t)
	press := func(words ...string) []string {
		t.Helper()
		cmd := exec.Command(bash, append([]string{"--norc", "--noprofile", "-c", setup + "\n" + tab, "bash", script}, words...)...)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, stderr.String())
		}
		var got []string
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			// With several candidates bash shows "name  (description)".
			if f := strings.Fields(line); len(f) > 0 {
				got = append(got, f[0])
			}
		}
		return got
	}
	if got := press("cryptimg", "reen"); !slices.Equal(got, []string{"reencrypt"}) {
		t.Errorf("cryptimg reen<Tab>: %q, want reencrypt", got)
	}
	if got := press("cryptimg", "ver"); !slices.Equal(got, []string{"verify", "verity", "version"}) {
		t.Errorf("cryptimg ver<Tab>: %q, want verify, verity and version", got)
	}
	if got := press("cryptimg", "completion", "f"); !slices.Equal(got, []string{"fish"}) {
		t.Errorf("cryptimg completion f<Tab>: %q, want fish", got)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestShellSyntax checks the zsh and fish scripts with their shells, when
// installed.
func TestShellSyntax(t *testing.T) {
	for _, c := range []struct {
		shell string
		args  []string
	}{
		{"zsh", []string{"-n"}},
		{"fish", []string{"--no-execute"}},
		{"pwsh", nil},
	} {
		t.Run(c.shell, func(t *testing.T) {
			path, err := exec.LookPath(c.shell)
			if err != nil {
				t.Skipf("%s is not installed; its completion script's syntax is not checked", c.shell)
			}
			if c.shell == "pwsh" {
				script := writeScript(t, "powershell")
				sh(t, path, "-NoProfile", "-NonInteractive", "-Command",
					"$e = $null; [System.Management.Automation.Language.Parser]::ParseFile('"+script+"', [ref]$null, [ref]$e) | Out-Null; if ($e.Count) { $e; exit 1 }")
				return
			}
			sh(t, path, append(c.args, writeScript(t, c.shell))...)
		})
	}
}
