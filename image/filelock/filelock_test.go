package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func tempFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func open(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestLockModes: shared locks coexist, an exclusive one excludes every
// other, in both orders, also between two opens in one process; closing
// the file releases the lock.
func TestLockModes(t *testing.T) {
	for _, c := range []struct {
		held, want Mode
		ok         bool
	}{
		{Shared, Shared, true},
		{Shared, Exclusive, false},
		{Exclusive, Shared, false},
		{Exclusive, Exclusive, false},
	} {
		p := tempFile(t)
		a, b := open(t, p), open(t, p)
		if err := Lock(a, p, c.held); err != nil {
			t.Fatalf("%v: %v", c.held, err)
		}
		err := Lock(b, p, c.want)
		if c.ok {
			if err != nil {
				t.Errorf("%v then %v: %v", c.held, c.want, err)
			}
			continue
		}
		var le *LockedError
		if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.Path != p || le.Mode != c.want {
			t.Fatalf("%v then %v: %v, want a LockedError", c.held, c.want, err)
		}
		a.Close()
		if err := Lock(b, p, c.want); err != nil {
			t.Errorf("%v after the holder closed: %v", c.want, err)
		}
	}
}

// TestTransient: Lock retries only where no holder is known, or the only
// ones are forks of this process that have not exec'd yet.
func TestTransient(t *testing.T) {
	other := os.Getpid() + 1
	for _, c := range []struct {
		hs   []Holder
		want bool
	}{
		{nil, true},
		{[]Holder{{PID: other, Args: os.Args}}, true},
		{[]Holder{{PID: os.Getpid(), Args: os.Args}}, false},
		{[]Holder{{PID: other, Args: []string{"cryptimg", "open"}}}, false},
		{[]Holder{{PID: other, Args: os.Args}, {PID: other + 1, Args: []string{"sleep"}}}, false},
	} {
		if got := transient(c.hs); got != c.want {
			t.Errorf("transient(%+v) = %v", c.hs, got)
		}
	}
}
