// Package kernel is cryptimg's oracle of record: it boots the real Linux
// kernel under qemu-system-x86_64 (software emulation, no KVM or root needed)
// with a small initramfs holding busybox, cryptsetup, veritysetup, dmsetup
// and the dm-crypt, dm-integrity, dm-verity and crypto modules, attaches image files as virtio
// disks and runs a shell job against them. What the kernel's dm-crypt reads
// from, or writes to, those files is what every other implementation has to
// agree with.
//
// Every cipher, key size, sector size and format cryptimg writes adds its
// cases to the oracle tests that use this package (cmd/cryptimg and
// image/integrity, kernel_test.go in each). Import it from tests only.
//
// The initramfs is built once per kernel and cached under the user cache
// directory, keyed by the kernel version and a hash of its manifest (every
// entry, and each host file's path, size and modification time), and read
// once per test process.
// Each boot appends a second, small cpio archive holding the job (the kernel
// unpacks concatenated archives in order), so the cached part never changes.
package kernel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// Modules the initramfs loads, by name; their dependencies come from the
// kernel's modules.dep and are loaded first. Built-in ones (cbc, hmac,
// sha256, aes) need nothing.
var modules = []string{
	"virtio_pci", "virtio_blk",
	"dm_mod", "dm_crypt", "dm_integrity", "dm_verity",
	"essiv", "xts", "aesni_intel", "sha256_ssse3",
	// The authenticated modes of LUKS2 --integrity: authenc (hmac with
	// cbc or xts) and gcm; algif_aead lets cryptsetup format aes-gcm-random.
	"authenc", "gcm", "ghash_generic", "algif_aead",
	"af_alg", "algif_skcipher", "algif_hash",
	"loop",
}

// Tools copied into the initramfs with the shared libraries ldd names.
var tools = map[string]string{"cryptsetup": "/sbin/cryptsetup", "dmsetup": "/sbin/dmsetup", "veritysetup": "/sbin/veritysetup"}

// MaxDisks is how many image files one boot attaches. One more virtio disk
// carries the job's output back.
const MaxDisks = 20

// DefaultTimeout bounds a boot whose Job sets none.
const DefaultTimeout = 3 * time.Minute

// Machine is a kernel and a cached initramfs, ready to boot jobs.
type Machine struct {
	Kernel  string // vmlinuz path
	Version string // kernel release, e.g. 6.1.0-57-cloud-amd64
	base    []byte // the cached base initramfs, read once
	qemu    string
}

var (
	once     sync.Once
	machine  *Machine
	setupErr error
	bootMu   sync.Mutex // boots run one at a time: TCG wants both CPUs
)

// Require returns the machine, building its initramfs on first use. When
// qemu-system-x86_64, a kernel with its modules, busybox-static, cryptsetup or
// dmsetup is missing, it skips the test and says why; with CI set it fails
// instead, so CI can never pass without the oracle.
func Require(t testing.TB) *Machine {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: boots a kernel under qemu (-short)")
	}
	once.Do(func() { machine, setupErr = setup() })
	if setupErr != nil {
		peer.Missing(t, fmt.Sprintf("the kernel oracle cannot boot: %v (Debian packages qemu-system-x86, linux-image-cloud-amd64, busybox-static, cryptsetup-bin)", setupErr))
	}
	return machine
}

func setup() (*Machine, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, errors.New("qemu-system-x86_64 not installed")
	}
	kern, ver, err := findKernel()
	if err != nil {
		return nil, err
	}
	a, err := buildArchive(ver)
	if err != nil {
		return nil, err
	}
	// The cache key covers the kernel version and everything that goes
	// into the archive (its manifest: names, modes, and each host file's
	// path, size and time), so a hit reads one file instead of dozens.
	sum := sha256.Sum256(append([]byte(ver+"\n"), a.manifest()...))
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "cryptimg", "kernel-oracle")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	initrd := filepath.Join(dir, fmt.Sprintf("initramfs-%s-%s.cpio", ver, hex.EncodeToString(sum[:8])))
	base, err := os.ReadFile(initrd)
	if err != nil {
		var buf bytes.Buffer
		if err := a.writeTo(&buf); err != nil {
			return nil, err
		}
		base = buf.Bytes()
		tmp := fmt.Sprintf("%s.%d.tmp", initrd, os.Getpid())
		if err := os.WriteFile(tmp, base, 0o644); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, initrd); err != nil {
			return nil, err
		}
	}
	return &Machine{Kernel: kern, Version: ver, base: base, qemu: qemu}, nil
}

// findKernel picks $CRYPTIMG_KERNEL or the newest /boot/vmlinuz-* whose
// modules are installed.
func findKernel() (path, version string, err error) {
	if p := os.Getenv("CRYPTIMG_KERNEL"); p != "" {
		v := strings.TrimPrefix(filepath.Base(p), "vmlinuz-")
		return p, v, nil
	}
	list, _ := filepath.Glob("/boot/vmlinuz-*")
	sort.Sort(sort.Reverse(sort.StringSlice(list)))
	for _, p := range list {
		v := strings.TrimPrefix(filepath.Base(p), "vmlinuz-")
		if _, err := os.Stat(filepath.Join("/lib/modules", v, "modules.dep")); err == nil {
			if f, err := os.Open(p); err == nil {
				f.Close()
				return p, v, nil
			}
		}
	}
	return "", "", errors.New("no readable /boot/vmlinuz-* with modules in /lib/modules")
}

// initScript is /init: mount the pseudo filesystems, load the modules, wait
// for the disks, run /job/run.sh and write its exit status and output to the
// last disk, then power off.
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run/cryptsetup /run/lock /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
dmesg -n 1
while read m; do insmod "/lib/modules/$m" || echo "oracle: insmod $m failed"; done < /etc/oracle-modules
. /job/env
i=0
while [ "$(ls /sys/block | grep -c '^vd')" -lt "$ORACLE_DISKS" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
cd /job
sh /job/run.sh > /tmp/out 2>&1 < /dev/null
rc=$?
{ echo "$rc"; wc -c < /tmp/out; cat /tmp/out; } > /tmp/result
dd if=/tmp/result of="$ORACLE_OUT" bs=65536 conv=fsync 2>/dev/null
sync
echo "oracle: job exited $rc"
poweroff -f
`

func buildArchive(ver string) (*archive, error) {
	a := newArchive()
	bb, err := staticBusybox()
	if err != nil {
		return nil, err
	}
	if err := addFile(a, bb, "/bin/busybox", 0o755); err != nil {
		return nil, err
	}
	a.file("init", 0o755, []byte(initScript))
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	libs := map[string]bool{}
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, fmt.Errorf("%s not installed", n)
		}
		if err := addFile(a, p, tools[n], 0o755); err != nil {
			return nil, err
		}
		l, err := sharedLibs(p)
		if err != nil {
			return nil, err
		}
		for _, x := range l {
			libs[x] = true
		}
	}
	// glibc loads libgcc_s on demand for thread cancellation.
	for _, p := range []string{"/lib/x86_64-linux-gnu/libgcc_s.so.1"} {
		if _, err := os.Stat(p); err == nil {
			libs[p] = true
		}
	}
	for l := range libs {
		if err := addFile(a, l, l, 0o755); err != nil {
			return nil, err
		}
	}
	order, err := moduleOrder(ver, modules)
	if err != nil {
		return nil, err
	}
	base := filepath.Join("/lib/modules", ver)
	var list strings.Builder
	for _, rel := range order {
		if err := addFile(a, filepath.Join(base, rel), filepath.Join("/lib/modules", rel), 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintln(&list, rel)
	}
	a.file("etc/oracle-modules", 0o644, []byte(list.String()))
	a.dirs("job")
	return a, nil
}

// addFile adds host file src as dst; the archive holds the file itself,
// symlinks followed. It fails now if src is missing.
func addFile(a *archive, src, dst string, perm uint32) error {
	if _, err := os.Stat(src); err != nil {
		return err
	}
	a.fileFrom(dst, perm, src)
	return nil
}

// staticBusybox finds busybox-static's binary; a dynamic busybox would need
// its libraries and is refused.
func staticBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		dynamic := false
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				dynamic = true
			}
		}
		f.Close()
		if !dynamic {
			return p, nil
		}
	}
	return "", errors.New("no static busybox (Debian package busybox-static)")
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// sharedLibs lists the libraries (and the dynamic loader) a binary needs.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := lddLine.FindStringSubmatch(sc.Text()); m != nil {
			libs = append(libs, m[1])
		}
	}
	return libs, nil
}

// moduleOrder resolves names to module files (relative to /lib/modules/VER)
// with every dependency before the modules that need it.
func moduleOrder(ver string, names []string) ([]string, error) {
	dep, err := os.ReadFile(filepath.Join("/lib/modules", ver, "modules.dep"))
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{} // file -> dependency files
	byName := map[string]string{} // canonical name -> file
	for _, line := range strings.Split(string(dep), "\n") {
		file, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[file] = strings.Fields(rest)
		byName[modName(file)] = file
	}
	var order []string
	seen := map[string]bool{}
	var visit func(f string)
	visit = func(f string) {
		if seen[f] {
			return
		}
		seen[f] = true
		d := deps[f]
		for i := len(d) - 1; i >= 0; i-- {
			visit(d[i])
		}
		order = append(order, f)
	}
	for _, n := range names {
		f, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			// Built into this kernel, or absent: the jobs will tell.
			continue
		}
		visit(f)
	}
	for _, f := range order {
		if !strings.HasSuffix(f, ".ko") {
			return nil, fmt.Errorf("module %s is compressed; only plain .ko files are supported", f)
		}
	}
	return order, nil
}

func modName(file string) string {
	b := filepath.Base(file)
	b = b[:strings.Index(b, ".ko")]
	return strings.ReplaceAll(b, "-", "_")
}

// Job is one boot: disks attached in order as /dev/vda, /dev/vdb, … (read
// and write), files placed in /job (the working directory), and a script run
// by busybox sh.
type Job struct {
	Disks   []string
	Files   map[string][]byte
	Script  string
	Timeout time.Duration
	// QemuArgs are added to qemu's command line (a TPM, for instance).
	QemuArgs []string
}

// Result is what a job left behind.
type Result struct {
	Code    int    // the script's exit status
	Output  string // its stdout and stderr
	Console string // the serial console, for diagnosis
	Elapsed time.Duration
}

// Device is the name disk i (0-based) gets in the guest.
func Device(i int) string {
	return "/dev/vd" + string(rune('a'+i))
}

// Run boots one job and returns its result. A boot that does not finish in
// time is killed; it and a boot that returns no result fail the test, with
// the console's tail.
func (m *Machine) Run(t testing.TB, job Job) Result {
	t.Helper()
	res, err := m.run(t.TempDir(), job)
	if err != nil {
		t.Fatalf("%v; console tail:\n%s", err, tail(res.Console))
	}
	t.Logf("kernel %s: job with %d disks took %.1fs", m.Version, len(job.Disks), res.Elapsed.Seconds())
	return res
}

// errTimeout is returned for a boot killed at its deadline.
var errTimeout = errors.New("kernel job timed out and was killed")

func (m *Machine) run(dir string, job Job) (Result, error) {
	if len(job.Disks) > MaxDisks {
		return Result{}, fmt.Errorf("kernel job with %d disks; at most %d", len(job.Disks), MaxDisks)
	}
	out := filepath.Join(dir, "oracle-output.raw")
	if err := os.WriteFile(out, nil, 0o600); err != nil {
		return Result{}, err
	}
	if err := os.Truncate(out, 32<<20); err != nil {
		return Result{}, err
	}
	ja := newArchive()
	ja.file("job/run.sh", 0o755, []byte(job.Script))
	ja.file("job/env", 0o644, []byte(fmt.Sprintf("ORACLE_DISKS=%d\nORACLE_OUT=%s\n", len(job.Disks)+1, Device(len(job.Disks)))))
	for name, data := range job.Files {
		ja.file("job/"+name, 0o600, data)
	}
	buf := bytes.NewBuffer(append([]byte(nil), m.base...))
	if err := ja.writeTo(buf); err != nil {
		return Result{}, err
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := os.WriteFile(initrd, buf.Bytes(), 0o600); err != nil {
		return Result{}, err
	}
	console := filepath.Join(dir, "console.log")
	args := []string{
		"-nodefaults", "-no-user-config", "-no-reboot",
		"-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "1024",
		"-display", "none", "-monitor", "none", "-serial", "file:" + console,
		"-kernel", m.Kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init",
	}
	for _, d := range append(append([]string(nil), job.Disks...), out) {
		args = append(args, "-drive", "file="+qemuEscape(d)+",format=raw,if=virtio")
	}
	args = append(args, job.QemuArgs...)
	timeout := job.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	bootMu.Lock()
	defer bootMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.qemu, args...)
	cmd.WaitDelay = 5 * time.Second
	var qout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qout, &qout
	start := time.Now()
	runErr := cmd.Run()
	res := Result{Elapsed: time.Since(start)}
	clog, _ := os.ReadFile(console)
	res.Console = string(clog)
	if ctx.Err() != nil {
		return res, fmt.Errorf("%w after %v", errTimeout, timeout)
	}
	if runErr != nil {
		return res, fmt.Errorf("qemu-system-x86_64: %v: %s", runErr, strings.TrimSpace(qout.String()))
	}
	code, output, err := parseResult(out)
	if err != nil {
		return res, fmt.Errorf("kernel job left no result: %v", err)
	}
	res.Code, res.Output = code, output
	return res, nil
}

// qemuEscape doubles commas, qemu's escape inside -drive options.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func parseResult(path string) (int, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	line1, err := r.ReadString('\n')
	if err != nil {
		return 0, "", errors.New("empty output disk")
	}
	code, err := strconv.Atoi(strings.TrimSpace(line1))
	if err != nil {
		return 0, "", fmt.Errorf("bad status line %q", line1)
	}
	line2, _ := r.ReadString('\n')
	n, err := strconv.Atoi(strings.TrimSpace(line2))
	if err != nil || n < 0 || n > 30<<20 {
		return 0, "", fmt.Errorf("bad length line %q", line2)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, "", err
	}
	return code, string(b), nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
