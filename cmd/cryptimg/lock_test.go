package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/image/filelock"
)

// holdLock locks path in this process the way a command holds it (mode m)
// until the returned function is called.
func holdLock(t *testing.T, path string, m filelock.Mode) func() {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := filelock.Lock(f, path, m); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return func() { f.Close() }
}

// wantBusy checks a run refused with exit 5 and one line naming the
// holder: opened read-write (an exclusive lock) or read-only (shared) by
// pid, with what is said of it in the parentheses.
func wantBusy(t *testing.T, r result, path, how string, pid int, what string) {
	t.Helper()
	want := fmt.Sprintf("cryptimg: error: %s is busy: opened %s by pid %d (%s", path, how, pid, what)
	if r.code != exitBusy || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("exit %d, %q; want 5 and %q...", r.code, r.stderr, want)
	}
}

// lockFixture is a small LUKS2 image with a token, its plaintext, a key,
// a second key, a header backup, and a detached-header pair.
type lockFixture struct {
	dir, img, plain, key, key2, backup, hdr, data string
}

func newLockFixture(t *testing.T) lockFixture {
	t.Helper()
	dir := t.TempDir()
	fx := lockFixture{
		dir:    dir,
		img:    filepath.Join(dir, "disk.luks"),
		plain:  randomFile(t, dir, "plain.raw", 1<<20),
		key:    writeFile(t, filepath.Join(dir, "key"), "lock passphrase"),
		key2:   writeFile(t, filepath.Join(dir, "key2"), "second passphrase"),
		backup: filepath.Join(dir, "disk.hdr-backup"),
		hdr:    filepath.Join(dir, "detached.hdr"),
		data:   filepath.Join(dir, "detached.data"),
	}
	mustRun(t, "encrypt", "-d", fx.key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, fx.plain, fx.img)
	mustRun(t, "token", "add", "--key-description", "lock test", fx.img)
	mustRun(t, "header-backup", fx.img, fx.backup)
	mustRun(t, "--header", fx.hdr, "encrypt", "-d", fx.key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, fx.plain, fx.data)
	return fx
}

// TestLockConflicts runs every command that writes an image or its header
// while a reader (shared) and while a writer (exclusive) holds it, and
// every command that reads one while a writer holds it: each exits 5 at
// once, names the holder (this process), and leaves the image as it was;
// no output appears. Holding the lock in this process stands for the other
// command: filelock's locks exclude each other between two opens of a
// file in one process as between processes.
func TestLockConflicts(t *testing.T) {
	fx := newLockFixture(t)
	out := filepath.Join(fx.dir, "out")
	writers := [][]string{
		{"reencrypt", "-q", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.img},
		{"decrypt", "--in-place", "-q", "-d", fx.key, fx.img},
		{"add-key", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.img, fx.key2},
		{"remove-key", "-q", "-d", fx.key, fx.img},
		{"kill-slot", "-q", fx.img, "0"},
		{"change-key", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.img, fx.key2},
		{"token", "add", "--key-description", "x", fx.img},
		{"token", "remove", "--token-id", "0", fx.img},
		{"token", "import", "--json-file", fx.key, fx.img},
		{"config", "--label", "busy", fx.img},
		{"repair", fx.img},
		{"uuid", "-q", "--uuid", "01234567-89ab-4cde-8f01-23456789abcd", fx.img},
		{"header-restore", "-q", fx.img, fx.backup},
		{"erase", "-q", fx.img},
		{"resize", "--size", "2M", fx.img},
		{"convert", "-q", "--type", "luks1", fx.img},
	}
	readers := [][]string{
		{"decrypt", "-d", fx.key, fx.img, out},
		{"decrypt", "-d", fx.key, fx.img, "-"},
		{"verify", "-d", fx.key, fx.img},
		{"ls", "-d", fx.key, fx.img},
		{"cat", "-d", fx.key, fx.img, "0:/x"},
		{"dump", fx.img},
		{"test-key", "-d", fx.key, fx.img},
		{"header-backup", fx.img, out},
		{"uuid", fx.img},
		{"is-luks", fx.img},
		{"token", "export", "--token-id", "0", fx.img},
		{"clone", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.img, out},
	}
	n := 0
	check := func(held filelock.Mode, args []string) {
		t.Helper()
		before := fileSHA(t, fx.img)
		release := holdLock(t, fx.img, held)
		r := cryptimg(t, "", args...)
		release()
		how := map[filelock.Mode]string{filelock.Shared: "read-only", filelock.Exclusive: "read-write"}[held]
		n++
		t.Run(fmt.Sprintf("%v/%d_%s", held, n, args[0]), func(t *testing.T) {
			wantBusy(t, r, fx.img, how, os.Getpid(), "cryptimg.test)")
			if fileSHA(t, fx.img) != before {
				t.Error("the image changed")
			}
			noFile(t, out)
		})
	}
	for _, args := range writers {
		check(filelock.Shared, args)
		check(filelock.Exclusive, args)
	}
	for _, args := range readers {
		check(filelock.Exclusive, args)
	}

	// The input of encrypt is read under a shared lock too.
	release := holdLock(t, fx.plain, filelock.Exclusive)
	for _, o := range []string{out, "-"} {
		r := cryptimg(t, "", "encrypt", "-d", fx.key, fastIter, fx.plain, o)
		wantBusy(t, r, fx.plain, "read-write", os.Getpid(), "cryptimg.test)")
	}
	release()
	noFile(t, out)
	// encrypt --in-place writes it.
	before := fileSHA(t, fx.plain)
	release = holdLock(t, fx.plain, filelock.Shared)
	r := cryptimg(t, "", "encrypt", "--in-place", "-q", "-d", fx.key, fastIter, fx.plain)
	wantBusy(t, r, fx.plain, "read-only", os.Getpid(), "cryptimg.test)")
	release()
	if fileSHA(t, fx.plain) != before {
		t.Error("encrypt --in-place changed a locked file")
	}
}

// TestLockReadersShare: readers run side by side; each succeeds while
// another holds a shared lock.
func TestLockReadersShare(t *testing.T) {
	fx := newLockFixture(t)
	defer holdLock(t, fx.img, filelock.Shared)()
	for i, args := range [][]string{
		{"decrypt", "-d", fx.key, fx.img, filepath.Join(fx.dir, "dec")},
		{"decrypt", "-d", fx.key, fx.img, "-"},
		{"dump", fx.img},
		{"test-key", "-d", fx.key, fx.img},
		{"header-backup", fx.img, filepath.Join(fx.dir, "backup2")},
		{"uuid", fx.img},
		{"is-luks", fx.img},
		{"token", "export", "--token-id", "0", fx.img},
		{"clone", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.img, filepath.Join(fx.dir, "clone")},
	} {
		r := mustRun(t, args...)
		if i == 1 && !bytes.Equal([]byte(r.stdout), mustRead(t, fx.plain)) {
			t.Error("decrypt to stdout under a shared lock: wrong plaintext")
		}
	}
	sameContent(t, fx.plain, filepath.Join(fx.dir, "dec"))
}

// TestLockDetachedHeader: with --header, the header file is locked as
// well as the data: a writer is refused while a reader holds either, a
// reader while a writer holds the header.
func TestLockDetachedHeader(t *testing.T) {
	fx := newLockFixture(t)
	out := filepath.Join(fx.dir, "out")
	for _, c := range []struct {
		held string
		mode filelock.Mode
		args []string
	}{
		{fx.hdr, filelock.Exclusive, []string{"decrypt", "-d", fx.key, fx.data, out}},
		{fx.hdr, filelock.Exclusive, []string{"dump", fx.data}},
		{fx.hdr, filelock.Shared, []string{"add-key", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.data, fx.key2}},
		{fx.hdr, filelock.Shared, []string{"erase", "-q", fx.data}},
		{fx.hdr, filelock.Shared, []string{"reencrypt", "-q", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.data}},
		{fx.data, filelock.Shared, []string{"reencrypt", "-q", "-d", fx.key, "--pbkdf", "pbkdf2", fastIter, fx.data}},
		{fx.data, filelock.Shared, []string{"resize", "--size", "2M", fx.data}},
		{fx.data, filelock.Shared, []string{"repair", fx.data}},
		{fx.hdr, filelock.Shared, []string{"repair", fx.data}},
		{fx.data, filelock.Exclusive, []string{"decrypt", "-d", fx.key, fx.data, out}},
	} {
		hb, db := fileSHA(t, fx.hdr), fileSHA(t, fx.data)
		release := holdLock(t, c.held, c.mode)
		r := cryptimg(t, "", append([]string{"--header", fx.hdr}, c.args...)...)
		release()
		how := map[filelock.Mode]string{filelock.Shared: "read-only", filelock.Exclusive: "read-write"}[c.mode]
		t.Run(fmt.Sprintf("%s_%v_%s", filepath.Base(c.held), c.mode, c.args[0]), func(t *testing.T) {
			wantBusy(t, r, c.held, how, os.Getpid(), "cryptimg.test)")
			if fileSHA(t, fx.hdr) != hb || fileSHA(t, fx.data) != db {
				t.Error("the header or the data changed")
			}
			noFile(t, out)
		})
	}
	// And with no lock held, they work: the files were left intact.
	mustRun(t, "--header", fx.hdr, "decrypt", "-d", fx.key, fx.data, out)
	sameContent(t, fx.plain, out)
}

// TestLockHeldByDecrypt is the reader repro: decrypt FILE - into
// a pipe nobody reads yet holds the image (shared) until it is done;
// reencrypt meanwhile exits 5 naming it, and the plaintext read later is
// right.
func TestLockHeldByDecrypt(t *testing.T) {
	fx := newLockFixture(t)
	big := randomFile(t, fx.dir, "big.raw", 8<<20)
	img := filepath.Join(fx.dir, "big.luks")
	mustRun(t, "encrypt", "-d", fx.key, fastIter, big, img)
	cmd := exec.Command(binary(t), "decrypt", "-j", "1", "-d", fx.key, img, "-")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The decrypt holds the lock once it has started; it blocks on the
	// full pipe long before the end of 8 MiB.
	waitLocked(t, img)
	before := fileSHA(t, img)
	r := cryptimg(t, "", "reencrypt", "-q", "-d", fx.key, fastIter, img)
	wantBusy(t, r, img, "read-only", cmd.Process.Pid, "cryptimg decrypt)")
	got, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("decrypt: %v\n%s", err, stderr.String())
	}
	if !bytes.Equal(got, mustRead(t, big)) {
		t.Error("the plaintext read through the pipe is wrong")
	}
	if fileSHA(t, img) != before {
		t.Error("the image changed under the reader")
	}
	// Released at exit.
	mustRun(t, "uuid", "-q", "--uuid", "01234567-89ab-4cde-8f01-23456789abcd", img)
}

// waitLocked waits until another process holds a lock on path.
func waitLocked(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = filelock.Lock(f, path, filelock.Exclusive)
		f.Close()
		if err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing locked %s within 20 s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLockOpen is the repro: while open --background serves the
// image read-write, reencrypt, add-key, a second open (read-write or
// read-only) and decrypt exit 5 naming the mount, and what was written
// through the mount stays there. A read-only mount shares the image with
// readers and another read-only mount, and still stops writers.
func TestLockOpen(t *testing.T) {
	requireFUSE(t)
	fx := newOpenFixture(t, 4<<20)
	key2 := writeFile(t, filepath.Join(fx.dir, "key2"), "second passphrase")
	mnt2 := filepath.Join(fx.dir, "mnt2")
	if err := os.Mkdir(mnt2, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, ok := findMount(mnt2); ok {
			lazyUnmount(mnt2)
		}
	})
	out := filepath.Join(fx.dir, "out")
	// open --background, as a second process would run it.
	openBG := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(binary(t), append([]string{"open", "--background", "-d", fx.key}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		return result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
	}
	mountPID := func(mnt string) int {
		t.Helper()
		m, ok := findMount(mnt)
		var pid int
		if _, err := fmt.Sscanf(m.source, "cryptimg:%d", &pid); !ok || err != nil {
			t.Fatalf("mount at %s: %+v", mnt, m)
		}
		return pid
	}

	fx.openBackground(t)
	data := make([]byte, 1<<20)
	copy(data, mustRead(t, filepath.Join(fx.dir, "key")))
	for i := range data {
		data[i] ^= byte(i * 7)
	}
	file := filepath.Join(fx.mnt, "disk.raw")
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before := fileSHA(t, fx.img)
	pid := mountPID(fx.mnt)
	what := "cryptimg open, mounted at " + fx.mnt + ")"
	for _, args := range [][]string{
		{"reencrypt", "-q", "-d", fx.key, fastIter, fx.img},
		{"add-key", "-d", fx.key, fastIter, fx.img, key2},
		{"decrypt", "-d", fx.key, fx.img, out},
	} {
		wantBusy(t, cryptimg(t, "", args...), fx.img, "read-write", pid, what)
	}
	wantBusy(t, openBG(fx.img, mnt2), fx.img, "read-write", pid, what)
	wantBusy(t, openBG("--read-only", fx.img, mnt2), fx.img, "read-write", pid, what)
	if _, ok := findMount(mnt2); ok {
		t.Error("a second open mounted the image")
	}
	if fileSHA(t, fx.img) != before {
		t.Error("the image changed under the read-write mount")
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got[4096:4096+len(data)], data) {
		t.Errorf("the data written through the mount: %v", err)
	}
	mustRun(t, "close", fx.mnt)

	// Read-only: shared with readers and another read-only mount.
	fx.openBackground(t, "--read-only")
	pid = mountPID(fx.mnt)
	mustRun(t, "decrypt", "-d", fx.key, fx.img, out)
	if got := mustRead(t, out); !bytes.Equal(got[4096:4096+len(data)], data) {
		t.Error("decrypt beside a read-only mount: wrong data")
	}
	if r := openBG("--read-only", fx.img, mnt2); r.code != 0 {
		t.Fatalf("a second read-only open: exit %d, %s", r.code, r.stderr)
	}
	mustRun(t, "close", mnt2)
	what = "cryptimg open, mounted at " + fx.mnt + ")"
	wantBusy(t, cryptimg(t, "", "reencrypt", "-q", "-d", fx.key, fastIter, fx.img), fx.img, "read-only", pid, what)
	wantBusy(t, openBG(fx.img, mnt2), fx.img, "read-only", pid, what)
	mustRun(t, "close", fx.mnt)
	// Once closed, the image is free.
	mustRun(t, "add-key", "-d", fx.key, fastIter, fx.img, key2)

	// The qcow2 case: a second read-write open is refused, so the
	// two cannot both allocate clusters.
	q := filepath.Join(fx.dir, "disk.qcow2")
	plain := filepath.Join(fx.dir, "plain.raw")
	mustRun(t, "encrypt", "-O", "qcow2", "-d", fx.key, fastIter, plain, q)
	qfx := fx
	qfx.img = q
	qfx.openBackground(t)
	wantBusy(t, openBG(q, mnt2), q, "read-write", mountPID(fx.mnt), "cryptimg open, mounted at "+fx.mnt+")")
	mustRun(t, "close", fx.mnt)
}

// TestLockCryptsetup: cryptsetup flocks a LUKS2 image file as cryptimg
// does, so each stops the other. cryptsetup's lock waits: under
// cryptimg's exclusive lock its luksDump does not finish; while its
// luksAddKey holds the write lock (through the new slot's PBKDF2),
// cryptimg's dump exits 5 naming it.
func TestLockCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	fx := lockFixture{img: filepath.Join(dir, "disk.luks"), key: writeFile(t, filepath.Join(dir, "key"), "lock passphrase"),
		key2: writeFile(t, filepath.Join(dir, "key2"), "second passphrase")}
	mustRun(t, "create", "-d", fx.key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--size", "1M", fx.img)
	release := holdLock(t, fx.img, filelock.Exclusive)
	dump := exec.Command(cs, "luksDump", fx.img)
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- dump.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("cryptsetup luksDump ran under cryptimg's exclusive lock: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("cryptsetup luksDump after the lock was released: %v", err)
	}

	add := exec.Command(cs, "luksAddKey", "-q", "--key-file", fx.key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "500000", fx.img, fx.key2)
	var stderr bytes.Buffer
	add.Stderr = &stderr
	if err := add.Start(); err != nil {
		t.Fatal(err)
	}
	// A shared lock fails only while cryptsetup holds its write lock, not
	// its read lock of the header load.
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := os.Open(fx.img)
		if err != nil {
			t.Fatal(err)
		}
		err = filelock.Lock(f, fx.img, filelock.Shared)
		f.Close()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			add.Process.Kill()
			add.Wait()
			t.Fatal("cryptsetup luksAddKey took no write lock within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := cryptimg(t, "", "dump", fx.img)
	if err := add.Wait(); err != nil {
		t.Fatalf("cryptsetup luksAddKey: %v\n%s", err, stderr.String())
	}
	wantBusy(t, r, fx.img, "read-write", add.Process.Pid, "cryptsetup)")
}

// TestBusyMessage words what filelock found: the holder's lock as
// read-write or read-only, cryptimg's command among global flags, other
// holders counted, and "another process" where none could be named.
func TestBusyMessage(t *testing.T) {
	for _, c := range []struct {
		le   filelock.LockedError
		want string
	}{
		{filelock.LockedError{Path: "a.luks", Mode: filelock.Shared},
			"a.luks is busy: opened read-write by another process"},
		{filelock.LockedError{Path: "a.luks", Mode: filelock.Exclusive},
			"a.luks is busy: in use by another process"},
		{filelock.LockedError{Path: "a.luks", Mode: filelock.Exclusive, Holders: []filelock.Holder{
			{PID: 7, Mode: filelock.Shared, Args: []string{"/usr/bin/cryptimg", "--jobs", "2", "decrypt", "a.luks", "-"}},
			{PID: 8, Mode: filelock.Shared, Args: []string{"cryptsetup", "luksDump"}},
			{PID: 9, Mode: filelock.Shared}}},
			"a.luks is busy: opened read-only by pid 7 (cryptimg decrypt) and 2 other processes"},
		{filelock.LockedError{Path: "a.luks", Mode: filelock.Shared, Holders: []filelock.Holder{{PID: 1 << 30, Mode: filelock.Exclusive}}},
			"a.luks is busy: opened read-write by pid 1073741824"},
	} {
		if got := busyMessage(&c.le); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

// TestLockForcedOutput: an existing OUTPUT that --force replaces is locked
// first. While another command holds it (a mount, a decrypt), encrypt and
// decrypt --force exit 5 naming the holder and leave it as it was: the
// rename would have swapped the file out from under them. Unheld, it is
// replaced.
func TestLockForcedOutput(t *testing.T) {
	fx := newLockFixture(t)
	out := filepath.Join(fx.dir, "out.img")
	copyImage(t, fx.img, out)
	before := fileSHA(t, out)
	cmds := [][]string{
		{"encrypt", "--force", "-d", fx.key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, fx.plain, out},
		{"decrypt", "--force", "-d", fx.key, fx.img, out},
	}
	release := holdLock(t, out, filelock.Shared)
	for _, args := range cmds {
		wantBusy(t, cryptimg(t, "", args...), out, "read-only", os.Getpid(), "cryptimg.test)")
		if fileSHA(t, out) != before {
			t.Fatalf("%s --force replaced an output another process holds", args[0])
		}
	}
	release()
	mustRun(t, cmds[1]...)
	sameContent(t, fx.plain, out)
}
