package peer

import (
	"fmt"
	"testing"
)

// recorder notes what Missing asked of the test instead of stopping it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

func TestMissing(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Missing(r, "frob is not installed")
	if r.skip == "" || r.fatal != "" {
		t.Fatalf("outside CI: skip %q, fatal %q", r.skip, r.fatal)
	}
	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	Missing(r, "frob is not installed")
	if r.fatal == "" || r.skip != "" {
		t.Fatalf("in CI: skip %q, fatal %q", r.skip, r.fatal)
	}
	if p := Path(t, "sh"); p == "" {
		t.Fatal("no path for sh")
	}
}
