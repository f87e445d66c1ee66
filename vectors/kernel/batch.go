package kernel

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Batch gathers many independent checks into one boot: booting costs about
// five seconds under emulation, a check a fraction of that.
//
// Each check is a shell snippet run in its own subshell with set -e; its exit
// status and output are reported separately. The helpers in [Prelude] are
// defined for every check.
type Batch struct {
	disks  []string
	files  map[string][]byte
	checks []check
}

type check struct{ name, script string }

// Prelude is shell defined before the checks run:
//
//	sha FILE [BYTES]   sha256 (hex) of FILE, or of its first BYTES bytes
//	unlock DEV NAME KEYFILE [cryptsetup options...]
//	                   cryptsetup open DEV as /dev/mapper/NAME, key from KEYFILE
//	lock NAME          cryptsetup close NAME
const Prelude = `
sha() { if [ -n "$2" ]; then head -c "$2" "$1"; else cat "$1"; fi | sha256sum | cut -d' ' -f1; }
unlock() { dev=$1; name=$2; key=$3; shift 3; cryptsetup open --key-file "$key" "$@" "$dev" "$name"; }
lock() { cryptsetup close "$1"; }
`

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{files: map[string][]byte{}} }

// Disk attaches an image file and returns its device name in the guest.
func (b *Batch) Disk(path string) string {
	b.disks = append(b.disks, path)
	return Device(len(b.disks) - 1)
}

// File places data in the guest's working directory and returns its path
// there. Key files travel this way.
func (b *Batch) File(name string, data []byte) string {
	if strings.ContainsAny(name, "/ '\"$") {
		panic("kernel: file name must be plain: " + name)
	}
	b.files[name] = data
	return "/job/" + name
}

// Check adds a named check.
func (b *Batch) Check(name, script string) {
	b.checks = append(b.checks, check{name, script})
}

// Len is the number of checks so far.
func (b *Batch) Len() int { return len(b.checks) }

// Results are the checks' outcomes by name.
type Results map[string]Result

const marker = "@@oracle-check "

// RunBatch boots the batch once and returns every check's result.
func (m *Machine) RunBatch(t testing.TB, b *Batch) Results {
	t.Helper()
	var s strings.Builder
	s.WriteString(Prelude)
	for i, c := range b.checks {
		// Output goes to a file first so that a check's last line without a
		// newline cannot swallow the marker.
		// The guest's uptime before and after, for the check's time.
		fmt.Fprintf(&s, "t0=$(cut -d' ' -f1 /proc/uptime)\n( set -e\n%s\n) > /tmp/check.%d 2>&1\nrc=$?\n", c.script, i)
		fmt.Fprintf(&s, "echo '%s%d begin'; cat /tmp/check.%d; echo; echo \"%s%d end $rc $t0 $(cut -d' ' -f1 /proc/uptime)\"\n", marker, i, i, marker, i)
	}
	res := m.Run(t, Job{Disks: b.disks, Files: b.files, Script: s.String()})
	out := Results{}
	var took []timed
	lines := strings.Split(res.Output, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], marker)
		if !ok || !strings.HasSuffix(rest, " begin") {
			continue
		}
		idx, err := strconv.Atoi(strings.TrimSuffix(rest, " begin"))
		if err != nil || idx < 0 || idx >= len(b.checks) {
			continue
		}
		var body []string
		for i++; i < len(lines); i++ {
			if r, ok := strings.CutPrefix(lines[i], fmt.Sprintf("%s%d end ", marker, idx)); ok {
				f := append(strings.Fields(r), "")
				code, _ := strconv.Atoi(f[0])
				if len(f) == 4 {
					t0, _ := strconv.ParseFloat(f[1], 64)
					t1, _ := strconv.ParseFloat(f[2], 64)
					took = append(took, timed{b.checks[idx].name, t1 - t0})
				}
				// Drop the newline added after the output.
				if n := len(body); n > 0 && body[n-1] == "" {
					body = body[:n-1]
				}
				out[b.checks[idx].name] = Result{Code: code, Output: strings.Join(body, "\n"), Elapsed: res.Elapsed}
				break
			}
			body = append(body, lines[i])
		}
	}
	logSlowest(t, took)
	for _, c := range b.checks {
		if _, ok := out[c.name]; !ok {
			t.Fatalf("kernel check %q reported nothing; job output:\n%s\nconsole tail:\n%s", c.name, res.Output, tail(res.Console))
		}
	}
	return out
}

// timed is a check's time in the guest, in seconds.
type timed struct {
	name string
	secs float64
}

// logSlowest logs the checks that took longest in the guest, so that a
// slow boot says where its time went.
func logSlowest(t testing.TB, took []timed) {
	t.Helper()
	if len(took) == 0 {
		return
	}
	sort.Slice(took, func(i, j int) bool { return took[i].secs > took[j].secs })
	var total float64
	for _, c := range took {
		total += c.secs
	}
	var top []string
	for _, c := range took[:min(5, len(took))] {
		top = append(top, fmt.Sprintf("%s %.1fs", c.name, c.secs))
	}
	t.Logf("kernel checks: %.1fs in all; slowest: %s", total, strings.Join(top, ", "))
}

// Want fails the test unless check name exited 0, and returns its output
// with surrounding space trimmed.
func (r Results) Want(t testing.TB, name string) string {
	t.Helper()
	c, ok := r[name]
	if !ok {
		t.Fatalf("no kernel check %q", name)
	}
	if c.Code != 0 {
		t.Errorf("kernel check %q exited %d:\n%s", name, c.Code, c.Output)
	}
	return strings.TrimSpace(c.Output)
}

// WantFail fails the test unless check name exited with code.
func (r Results) WantFail(t testing.TB, name string, code int) {
	t.Helper()
	c, ok := r[name]
	if !ok {
		t.Fatalf("no kernel check %q", name)
	}
	if c.Code != code {
		t.Errorf("kernel check %q exited %d, want %d:\n%s", name, c.Code, code, c.Output)
	}
}
