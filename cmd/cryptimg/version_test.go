package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// versionLine is the text output of cryptimg version.
var versionLine = regexp.MustCompile(`^cryptimg (\S+) \(aes kernel: (\S+), xts kernel: (\S+)\)\n$`)

// decodeOne decodes stdout as exactly one JSON object.
func decodeOne(t *testing.T, stdout string, v any) {
	t.Helper()
	if strings.Count(stdout, "\n") != 1 || !strings.HasSuffix(stdout, "\n") {
		t.Fatalf("want one line of JSON, got %q", stdout)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v in %q", err, stdout)
	}
}

type versionOut struct {
	MessageType string  `json:"message_type"`
	Version     string  `json:"version"`
	Module      *string `json:"module"`
	Go          string  `json:"go"`
	OS          string  `json:"os"`
	Arch        string  `json:"arch"`
	AES         string  `json:"aes"`
	XTS         string  `json:"xts"`
}

func TestVersionJSON(t *testing.T) {
	text := mustRun(t, "version").stdout
	m := versionLine.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("version prints %q", text)
	}
	var v versionOut
	decodeOne(t, mustRun(t, "version", "--json").stdout, &v)
	if v.MessageType != "version" || v.Version != m[1] || v.AES != m[2] || v.XTS != m[3] {
		t.Errorf("version --json %+v disagrees with %q", v, text)
	}
	if v.Go != runtime.Version() || v.OS != runtime.GOOS || v.Arch != runtime.GOARCH {
		t.Errorf("version --json says go %q on %s/%s, want %s on %s/%s", v.Go, v.OS, v.Arch, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	bi, ok := debug.ReadBuildInfo()
	switch {
	case ok && bi.Main.Version != "":
		if v.Module == nil || *v.Module != bi.Main.Version {
			t.Errorf("module %v, want the build info's %q", v.Module, bi.Main.Version)
		}
	case v.Module != nil:
		t.Errorf("module %q without a module version in the build info", *v.Module)
	}
}

// TestVersionJSONBinary builds cryptimg with -X main.Version: version is
// then that, and module the main module's version as go version -m reads
// it from the binary.
func TestVersionJSONBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cryptimg")
	}
	bin := filepath.Join(t.TempDir(), "cryptimg")
	if out, err := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.Version=v9.8.7", ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	mod := regexp.MustCompile(`(?m)^\tmod\tgithub\.com/cryptimg/cryptimg\t(\S+)`).FindSubmatch(out)
	if mod == nil {
		t.Fatalf("go version -m names no main module:\n%s", out)
	}
	js, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v versionOut
	decodeOne(t, string(js), &v)
	if v.Version != "v9.8.7" || v.Module == nil || *v.Module != string(mod[1]) {
		t.Errorf("version --json %s: want version v9.8.7 and module %s", bytes.TrimSpace(js), mod[1])
	}
	text, _ := exec.Command(bin, "version").Output()
	if m := versionLine.FindSubmatch(text); m == nil || string(m[1]) != "v9.8.7" || string(m[2]) != v.AES || string(m[3]) != v.XTS {
		t.Errorf("version prints %q, --json says %s", text, bytes.TrimSpace(js))
	}
}
