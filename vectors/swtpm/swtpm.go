// Package swtpm runs software TPMs (swtpm) for the systemd-tpm2 oracle
// tests, makes the storage root key systemd uses with tpm2-tools, and finds
// Debian 13's systemd 257 userland that scripts/trixie-systemd.sh unpacks.
// Missing programs skip outside CI and fail in it (vectors/peer). Import it
// from tests only.
package swtpm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// A TPM is a running swtpm on 127.0.0.1: the command channel on Port, the
// control channel on Port+1, as tpm2-tss's swtpm TCTI expects.
type TPM struct {
	Port  int
	State string // the state directory
	cmd   *exec.Cmd
}

// Device is the TPM as systemd and tpm2-tools name it.
func (s *TPM) Device() string { return fmt.Sprintf("swtpm:host=127.0.0.1,port=%d", s.Port) }

// Start runs a fresh swtpm, started up (TPM2_Startup done), stopped when
// the test ends.
func Start(t testing.TB) *TPM {
	t.Helper()
	peer.Require(t, "swtpm", "tpm2_createprimary")
	s := &TPM{State: t.TempDir()}
	for try := 0; ; try++ {
		s.Port = freePorts(t)
		s.cmd = exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+s.State,
			"--server", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", s.Port),
			"--ctrl", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", s.Port+1),
			"--flags", "not-need-init,startup-clear")
		out := &strings.Builder{}
		s.cmd.Stdout, s.cmd.Stderr = out, out
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if waitPort(s.Port) {
			break
		}
		s.cmd.Process.Kill()
		s.cmd.Wait()
		if try == 5 {
			t.Fatalf("swtpm did not start: %s", out)
		}
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	return s
}

// StartSocket runs a fresh swtpm serving its command channel on a Unix
// socket, whose path it returns.
func StartSocket(t testing.TB) string {
	t.Helper()
	peer.Require(t, "swtpm")
	dir := t.TempDir()
	sock := filepath.Join(dir, "tpm.sock")
	return runUntilSocket(t, sock, "--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock, "--ctrl", "type=unixio,path="+filepath.Join(dir, "ctrl.sock"),
		"--flags", "not-need-init,startup-clear")
}

// runUntilSocket runs "swtpm socket --tpm2 ARGS..." for the rest of the
// test and returns sock once swtpm has made it.
func runUntilSocket(t testing.TB, sock string, args ...string) string {
	t.Helper()
	cmd := exec.Command("swtpm", append([]string{"socket", "--tpm2"}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for range 100 {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("swtpm made no socket %s", sock)
	return ""
}

// Stop ends the swtpm; its state directory stays.
func (s *TPM) Stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// StartForQEMU runs a swtpm on state directory dir (another TPM's State,
// stopped) with only a control socket, for qemu's -tpmdev emulator, which
// starts the TPM itself; it returns the socket's path.
func StartForQEMU(t testing.TB, dir string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "swtpm-ctrl.sock")
	return runUntilSocket(t, sock, "--tpmstate", "dir="+dir, "--ctrl", "type=unixio,path="+sock)
}

// Systemd257Files returns the files of Debian 13's userland that running
// its cryptsetup with the systemd-tpm2 token plugin needs, by path
// relative to root: the binaries and plugin and, transitively, the
// libraries the loader lists for them, with the tpm2-tss libraries systemd
// dlopen()s.
func Systemd257Files(t testing.TB, root string) map[string][]byte {
	t.Helper()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	want := []string{
		filepath.Join(root, "usr/sbin/cryptsetup"),
		filepath.Join(lib, "ld-linux-x86-64.so.2"),
		filepath.Join(lib, "cryptsetup/libcryptsetup-token-systemd-tpm2.so"),
	}
	for _, l := range []string{"libtss2-esys.so.0", "libtss2-rc.so.0", "libtss2-mu.so.0", "libtss2-tctildr.so.0", "libtss2-tcti-device.so.0"} {
		want = append(want, filepath.Join(lib, l))
	}
	files := map[string][]byte{}
	add := func(p string) {
		rel, err := filepath.Rel(root, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return
		}
		if _, ok := files[rel]; ok {
			return
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[rel] = b
	}
	for _, w := range want {
		add(w)
		out, err := exec.Command(filepath.Join(lib, "ld-linux-x86-64.so.2"), "--library-path",
			lib+":"+filepath.Join(lib, "systemd"), "--list", w).Output()
		if err != nil {
			t.Fatalf("listing the libraries of %s: %v", w, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[1] == "=>" {
				add(f[2])
			}
		}
	}
	return files
}

// freePorts finds a port P with P+1 also free.
func freePorts(t testing.TB) int {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two free ports in a row")
	return 0
}

func waitPort(p int) bool {
	for range 100 {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// Tools runs a tpm2-tools program against the TPM and returns its output.
func (s *TPM) Tools(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := s.ToolsErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// ToolsErr is Tools returning the error.
func (s *TPM) ToolsErr(name string, args ...string) ([]byte, error) {
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), "TPM2TOOLS_TCTI="+s.Device())
	return c.CombinedOutput()
}

// MakeSRK creates systemd's ECC storage root key (ECC P-256, AES-128-CFB,
// fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|decrypt|noda),
// persists it at 0x81000001 and writes its TPM2B_PUBLIC to a file, whose
// path it returns (as tpm2_readpublic -o and systemd-analyze srk write it).
func (s *TPM) MakeSRK(t testing.TB) string {
	t.Helper()
	return s.MakeKey(t, "ecc256:aes128cfb", "0x81000001")
}

// MakeKey makes a storage key like the SRK with another algorithm (as
// tpm2_createprimary -G takes it) at another persistent handle.
func (s *TPM) MakeKey(t testing.TB, alg, handle string) string {
	t.Helper()
	dir := t.TempDir()
	ctx := filepath.Join(dir, "srk.ctx")
	pub := filepath.Join(dir, "srk.pub")
	s.Tools(t, "tpm2_createprimary", "-C", "o", "-G", alg, "-g", "sha256", "-c", ctx,
		"-a", "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|decrypt|noda")
	s.Tools(t, "tpm2_evictcontrol", "-C", "o", "-c", ctx, handle)
	s.Tools(t, "tpm2_flushcontext", "-t")
	s.Tools(t, "tpm2_readpublic", "-c", handle, "-o", pub)
	return pub
}

// Systemd257 returns the root of Debian 13's systemd userland
// (scripts/trixie-systemd.sh): $CRYPTIMG_TRIXIE_SYSTEMD, else
// /var/cache/cryptimg/trixie-systemd; missing, it skips (fails in CI).
func Systemd257(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CRYPTIMG_TRIXIE_SYSTEMD")
	if dir == "" {
		dir = "/var/cache/cryptimg/trixie-systemd"
	}
	if _, err := os.Stat(filepath.Join(dir, ".done")); err != nil {
		peer.Missing(t, "Debian 13's systemd 257 is not unpacked in "+dir+" (run scripts/trixie-systemd.sh)")
	}
	return dir
}

// Command runs ROOT/usr/bin/NAME (or sbin) with ROOT's own loader and
// libraries.
func Command(root, name string, args ...string) *exec.Cmd {
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	bin := filepath.Join(root, "usr/bin", name)
	if _, err := os.Stat(bin); err != nil {
		bin = filepath.Join(root, "usr/sbin", name)
	}
	a := append([]string{"--library-path", lib + ":" + filepath.Join(lib, "systemd"), bin}, args...)
	return exec.Command(filepath.Join(lib, "ld-linux-x86-64.so.2"), a...)
}
