package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/vectors/kernel"
	"github.com/cryptimg/cryptimg/vectors/swtpm"
)

// TestKernelTPM2: systemd's own unlock path, in a VM with the TPM the
// token was sealed to. cryptimg seals offline to a swtpm's SRK; the swtpm
// then backs the kernel oracle's VM as a TIS TPM (PCRs reset at start-up,
// so PCR 15 is zero), and Debian 13's cryptsetup 2.7 with systemd 257's
// systemd-tpm2 token plugin opens the image through the token alone (the
// password slot wiped). An image sealed to another PCR 15 value is refused.
func TestKernelTPM2(t *testing.T) {
	m := kernel.Require(t)
	root := swtpm.Systemd257(t)
	requireTool(t, "swtpm")
	tp := swtpm.Start(t)
	srk := tp.MakeSRK(t)
	tp.Stop()

	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	good := luks2Small(t, dir, "good.luks2", key, "", "luks2")
	bad := filepath.Join(dir, "bad.luks2")
	copyFile(t, good, bad)
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", "15:sha256="+strings.Repeat("00", 32), "--wipe-slot", "password", good)
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", "15:sha256="+strings.Repeat("11", 32), "--wipe-slot", "password", bad)

	sock := swtpm.StartForQEMU(t, tp.State)
	files := map[string][]byte{}
	for rel, b := range swtpm.Systemd257Files(t, root) {
		files["root/"+rel] = b
	}
	r := m.Run(t, kernel.Job{
		Disks: []string{good, bad},
		Files: files,
		QemuArgs: []string{"-chardev", "socket,id=chrtpm,path=" + sock,
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0"},
		Script: `R=/job/root; L=$R/usr/lib/x86_64-linux-gnu
chmod 755 $L/ld-linux-x86-64.so.2
ls /sys/class/tpmrm/
cs() { $L/ld-linux-x86-64.so.2 --library-path $L:$L/systemd $R/usr/sbin/cryptsetup "$@"; }
cs --version
cs open --test-passphrase --token-only --external-tokens-path $L/cryptsetup --disable-locks ` + kernel.Device(0) + ` && echo GOOD-OPENED
cs open --test-passphrase --token-only --external-tokens-path $L/cryptsetup --disable-locks ` + kernel.Device(1) + ` && echo BAD-OPENED
true
`,
	})
	if !strings.Contains(r.Output, "cryptsetup 2.7") || !strings.Contains(r.Output, "tpmrm0") {
		t.Fatalf("no Debian 13 cryptsetup or no TPM in the guest:\n%s", r.Output)
	}
	if !strings.Contains(r.Output, "GOOD-OPENED") {
		t.Errorf("systemd's token plugin did not open cryptimg's token:\n%s", r.Output)
	}
	if strings.Contains(r.Output, "BAD-OPENED") {
		t.Errorf("a token sealed to another PCR 15 value opened:\n%s", r.Output)
	}
}
