//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// asOtherUser prepares runs of the real binary as a user other than root,
// for whom /proc shows whether a process is dumpable: nobody when the
// tests run as root (the binary is copied into a directory nobody can use),
// else the tests' own user. It returns that directory, the binary and the
// user's uid; run makes a command that runs as that user.
func asOtherUser(t *testing.T) (dir, bin string, uid int, run func(name string, args ...string) *exec.Cmd) {
	t.Helper()
	uid = os.Geteuid()
	var cred *syscall.Credential
	if uid == 0 {
		uid = nobody
		cred = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	dir, err := os.MkdirTemp("", "cryptimg-secmem-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin = filepath.Join(dir, "cryptimg")
	copyImage(t, binary(t), bin)
	os.Chmod(bin, 0o755)
	if err := os.Chown(dir, uid, -1); err != nil {
		t.Fatal(err)
	}
	run = func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = dir
		return cmd
	}
	return dir, bin, uid, run
}

// giveTo hands the files to uid.
func giveTo(t *testing.T, uid int, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Chown(p, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
}

// procOwner returns the owner of /proc/PID/status: root for a process that
// is not dumpable, its user otherwise.
func procOwner(t *testing.T, pid int) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid)+"/status", &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid)
}

// TestNotDumpable: every command makes itself non-dumpable first thing
// (no core dump, no ptrace or /proc/PID/mem by the same user): while
// test-key waits for its key on stdin, its /proc files belong to root,
// not to the user running it.
func TestNotDumpable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir, bin, uid, run := asOtherUser(t)
	key := writeFile(t, filepath.Join(dir, "key"), "dumpable?")
	img := filepath.Join(dir, "disk.luks")
	fastEncrypt(t, key, randomFile(t, dir, "plain.raw", 64<<10), img)
	giveTo(t, uid, img)

	cmd := run(bin, "test-key", "-d", "-", img)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Until exec, the child is a copy of this (root) process: wait until
	// /proc shows the binary, then for the owner to turn to root.
	owner := -1
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !bytes.HasPrefix(b, []byte(bin+"\x00")) {
			continue
		}
		if owner = procOwner(t, pid); owner == 0 {
			break
		}
	}
	stdin.Write([]byte("dumpable?"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("test-key: %v\n%s", err, out.String())
	}
	if owner != 0 {
		t.Errorf("/proc/PID/status of a running command belongs to uid %d, want 0 (not dumpable); the user is %d", owner, uid)
	}
}

// TestLockRefusedCommandsWork: with RLIMIT_MEMLOCK at 0 and no
// CAP_IPC_LOCK, no secret can be locked; the commands work all the same,
// quietly, as cryptsetup's do.
func TestLockRefusedCommandsWork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	prlimit := requireTool(t, "prlimit")
	dir, bin, uid, run := asOtherUser(t)
	key := writeFile(t, filepath.Join(dir, "key"), "nothing locked")
	plain := randomFile(t, dir, "plain.raw", 256<<10)
	giveTo(t, uid, key, plain)
	for _, args := range [][]string{
		{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, "disk.luks"},
		{"decrypt", "-d", key, "disk.luks", "out.raw"},
	} {
		cmd := run(prlimit, append([]string{"--memlock=0:0", "--", bin}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s with RLIMIT_MEMLOCK 0: %v\n%s", args[0], err, out)
		} else if strings.Contains(string(out), "lock") {
			t.Errorf("%s says something about locking: %s", args[0], out)
		}
	}
	want, _ := os.ReadFile(plain)
	if got, _ := os.ReadFile(filepath.Join(dir, "out.raw")); !bytes.Equal(got, want) {
		t.Error("the round trip with nothing locked changed the data")
	}
}

// checkSecretsHeld checks the process that serves the cryptimg mount at
// mnt, which runs as uid: it is not dumpable (seen when uid is not root),
// and, where the tests run as root and can read its smaps, its secrets
// (volume key, round keys) are in mappings left out of core dumps (VmFlags
// dd), locked where this process's RLIMIT_MEMLOCK allows it.
func checkSecretsHeld(t *testing.T, mnt string, uid int) {
	t.Helper()
	m, ok := findMount(mnt)
	if !ok {
		t.Fatalf("%s is not mounted", mnt)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(m.source, "cryptimg:"))
	if err != nil {
		t.Fatalf("mount source %q", m.source)
	}
	if uid != 0 {
		if owner := procOwner(t, pid); owner != 0 {
			t.Errorf("the open process's /proc files belong to uid %d: it is dumpable", owner)
		}
	}
	if os.Geteuid() != 0 {
		// Its smaps is closed to its own user: that is the point.
		return
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dd, lockedKB, locked int
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		switch {
		case len(fields) >= 2 && fields[0] == "Locked:":
			locked, _ = strconv.Atoi(fields[1])
		case len(fields) > 0 && fields[0] == "VmFlags:":
			// Anonymous writable memory marked dd is package secmem's;
			// the kernel marks some of its own mappings (vvar) dd too.
			flags := " " + strings.Join(fields[1:], " ") + " "
			if strings.Contains(flags, " dd ") && strings.Contains(flags, " wr ") && !strings.Contains(flags, " pf ") {
				dd++
				lockedKB += locked
			}
		}
	}
	// The volume key and the key schedules; adjacent mappings with the
	// same flags merge, so there may be only one.
	if dd == 0 {
		t.Error("the open process has no mapping left out of core dumps (VmFlags dd)")
	}
	var l unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l)
	if l.Cur >= 64<<10 && lockedKB == 0 {
		t.Errorf("the open process's secret mappings are not locked (RLIMIT_MEMLOCK %d)", l.Cur)
	}
}

// TestOpenBackgroundLongKey: the parent passes the whole volume key to the
// background process, also the 96 bytes of aes-xts-plain64 with
// hmac(sha256) integrity (the child read at most 64 and refused the key).
func TestOpenBackgroundLongKey(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	fx := openFixture{dir: dir, img: filepath.Join(dir, "disk.luks"), key: writeFile(t, filepath.Join(dir, "key"), "long key"),
		mnt: filepath.Join(dir, "mnt"), size: 1 << 20}
	if err := os.Mkdir(fx.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, ok := findMount(fx.mnt); ok {
			lazyUnmount(fx.mnt)
		}
	})
	mustRun(t, "encrypt", "-d", fx.key, "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--cipher", "aes-xts-plain64", "--integrity", "hmac-sha256", plain, fx.img)
	fx.openBackground(t)
	want, _ := os.ReadFile(plain)
	if got, err := os.ReadFile(filepath.Join(fx.mnt, "disk.raw")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("plaintext through the mount differs (%v)", err)
	}
	mustRun(t, "close", fx.mnt)
}
