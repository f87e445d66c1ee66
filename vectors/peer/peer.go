// Package peer finds the programs cryptimg's interop tests run against
// (cryptsetup, qemu-img, qemu-io, sfdisk, ...), with one rule for all of
// them: outside CI a missing program skips the test and says so; with the
// environment variable CI set it fails the test, so CI can never pass
// without the interop tests. Import it from tests only.
package peer

import (
	"os"
	"os/exec"
	"testing"
)

// Require returns the path of each named program, in order, or skips (fails
// in CI) the test at the first one that is not installed.
func Require(t testing.TB, names ...string) []string {
	t.Helper()
	paths := make([]string, len(names))
	for i, name := range names {
		p, err := exec.LookPath(name)
		if err != nil {
			Missing(t, name+" is not installed")
		}
		paths[i] = p
	}
	return paths
}

// Path is Require for one program.
func Path(t testing.TB, name string) string {
	t.Helper()
	return Require(t, name)[0]
}

// Missing skips the test, or fails it in CI, for a missing prerequisite.
func Missing(t testing.TB, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s; it is required in CI (scripts/test.sh installs the Debian packages as root)", why)
		return
	}
	t.Skipf("skipping: %s (scripts/test.sh installs the Debian packages when run as root)", why)
}

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") != "" }
