package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// expectCode runs cryptimg in-process and fails unless it exits with code.
func expectCode(t *testing.T, code int, args ...string) result {
	t.Helper()
	r := cryptimg(t, "", args...)
	if r.code != code {
		t.Fatalf("cryptimg %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), r.code, code, r.stderr)
	}
	return r
}

// csCode runs cryptsetup and returns its exit code.
func csCode(t *testing.T, cs string, args ...string) int {
	t.Helper()
	out, err := exec.Command(cs, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("cryptsetup %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return 0
}

// keyFixture is an encrypted test image and key files for it.
type keyFixture struct {
	dir, img, plain string
	keys            []string // keys[0] is in slot 0
}

// newKeyFixture encrypts 64 KiB of random data with keys[0] ("key0") in
// slot 0, and writes key files key1..key5 not yet in the image.
func newKeyFixture(t *testing.T, extra ...string) *keyFixture {
	t.Helper()
	dir := t.TempDir()
	k := &keyFixture{dir: dir, img: filepath.Join(dir, "img"), plain: randomFile(t, dir, "plain.raw", 64<<10)}
	for i := 0; i < 6; i++ {
		k.keys = append(k.keys, writeFile(t, filepath.Join(dir, "key"+string(rune('0'+i))), "pass phrase "+string(rune('0'+i))))
	}
	fastEncrypt(t, k.keys[0], k.plain, k.img, extra...)
	return k
}

// decryptsTo checks that key decrypts the image to the original plaintext.
func (k *keyFixture) decryptsTo(t *testing.T, key string) {
	t.Helper()
	out := filepath.Join(k.dir, "out.raw")
	os.Remove(out)
	mustRun(t, "decrypt", "-d", key, "-O", "raw", k.img, out)
	sameContent(t, k.plain, out)
}

const fastIter = "--pbkdf-force-iterations=1000"

func TestKeysInteropWithCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	k := newKeyFixture(t)
	img, key := k.img, k.keys

	// Added by cryptimg, opened by cryptsetup in exactly that slot.
	mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], "-S", "3", fastIter, img)
	if c := csCode(t, cs, "open", "--test-passphrase", "--key-slot", "3", "-d", key[1], img); c != 0 {
		t.Fatalf("cryptsetup rejects the slot cryptimg added: exit %d", c)
	}
	if c := csCode(t, cs, "open", "--test-passphrase", "--key-slot", "0", "-d", key[1], img); c != 2 {
		t.Errorf("new key in slot 0: cryptsetup exit %d, want 2", c)
	}
	// The positional NEW_KEY_FILE and the first free slot (1).
	mustRun(t, "add-key", "-q", "-d", key[1], fastIter, img, key[2])
	if c := csCode(t, cs, "open", "--test-passphrase", "--key-slot", "1", "-d", key[2], img); c != 0 {
		t.Fatalf("cryptsetup: slot 1 exit %d", c)
	}

	// Added by cryptsetup, opened by cryptimg.
	sh(t, cs, "luksAddKey", "-q", "--pbkdf-force-iterations", "1000", "-d", key[0], "-S", "5", img, key[3])
	expectCode(t, 0, "test-key", "-d", key[3], "-S", "5", img)
	expectCode(t, 2, "test-key", "-d", key[3], "-S", "3", img)
	k.decryptsTo(t, key[3])

	// Removed by cryptimg: gone for both.
	mustRun(t, "remove-key", "-q", "-d", key[3], img)
	if c := csCode(t, cs, "open", "--test-passphrase", "-d", key[3], img); c != 2 {
		t.Errorf("key removed by cryptimg: cryptsetup exit %d, want 2", c)
	}
	expectCode(t, 2, "test-key", "-d", key[3], img)
	mustRun(t, "kill-slot", "-q", "-d", key[0], img, "1")
	if c := csCode(t, cs, "open", "--test-passphrase", "-d", key[2], img); c != 2 {
		t.Errorf("slot killed by cryptimg: cryptsetup exit %d, want 2", c)
	}
	// Removed by cryptsetup: gone for both.
	sh(t, cs, "luksRemoveKey", "-q", "-d", key[1], img)
	expectCode(t, 2, "test-key", "-d", key[1], img)
	if c := csCode(t, cs, "open", "--test-passphrase", "-d", key[1], img); c != 2 {
		t.Errorf("key removed by cryptsetup: cryptsetup exit %d", c)
	}

	// Changed by cryptimg: new key works in both, old in neither.
	mustRun(t, "change-key", "-q", "-d", key[0], "--new-key-file", key[4], fastIter, img)
	if c := csCode(t, cs, "open", "--test-passphrase", "-d", key[4], img); c != 0 {
		t.Errorf("key changed by cryptimg: cryptsetup exit %d", c)
	}
	if c := csCode(t, cs, "open", "--test-passphrase", "-d", key[0], img); c != 2 {
		t.Errorf("old key after cryptimg change-key: cryptsetup exit %d, want 2", c)
	}
	expectCode(t, 2, "test-key", "-d", key[0], img)
	// Changed by cryptsetup.
	sh(t, cs, "luksChangeKey", "-q", "--pbkdf-force-iterations", "1000", "-d", key[4], img, key[5])
	expectCode(t, 0, "test-key", "-d", key[5], img)
	expectCode(t, 2, "test-key", "-d", key[4], img)
	k.decryptsTo(t, key[5])

	// The volume key unlocks add-key too.
	vk := filepath.Join(k.dir, "vk")
	sh(t, cs, "luksDump", "-q", "--dump-volume-key", "--volume-key-file", vk, "-d", key[5], img)
	mustRun(t, "add-key", "-q", "--volume-key-file", vk, "--new-key-file", key[0], fastIter, img)
	if c := csCode(t, cs, "open", "--test-passphrase", "-d", key[0], img); c != 0 {
		t.Errorf("slot added with the volume key: cryptsetup exit %d", c)
	}
	writeFile(t, vk, strings.Repeat("x", 32))
	expectCode(t, 2, "add-key", "-q", "--volume-key-file", vk, "--new-key-file", key[1], fastIter, img)
}

func TestKeysOnQcow2(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	k := newKeyFixture(t, "-O", "qcow2")
	img, key := k.img, k.keys
	mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], fastIter, img)
	mustRun(t, "change-key", "-q", "-d", key[0], "--new-key-file", key[2], fastIter, img)
	expectCode(t, 2, "test-key", "-d", key[0], img)
	mustRun(t, "remove-key", "-q", "-d", key[1], img)
	expectCode(t, 2, "test-key", "-d", key[1], img)
	k.decryptsTo(t, key[2])
	// qemu-img opens the image with the changed key.
	out := filepath.Join(k.dir, "qemu.raw")
	sh(t, qi, "convert", "--object", qemuSecret(key[2]), "--image-opts",
		"driver=qcow2,encrypt.key-secret=sec0,file.filename="+img, "-O", "raw", out)
	sameContent(t, k.plain, out)

	// Header backup and restore through the qcow2 LUKS area.
	hdr := filepath.Join(k.dir, "hdr")
	mustRun(t, "header-backup", img, hdr)
	mustRun(t, "add-key", "-q", "-d", key[2], "--new-key-file", key[3], fastIter, img)
	mustRun(t, "header-restore", "-q", img, hdr)
	expectCode(t, 2, "test-key", "-d", key[3], img)
	k.decryptsTo(t, key[2])
}

func TestKeysNeedConfirmation(t *testing.T) {
	k := newKeyFixture(t)
	img, key := k.img, k.keys
	mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], fastIter, img)
	hdr := filepath.Join(k.dir, "hdr")
	mustRun(t, "header-backup", img, hdr)
	before := fileSHA(t, img)
	for _, args := range [][]string{
		{"remove-key", "-d", key[1], img},
		{"kill-slot", "-d", key[0], img, "1"},
		{"header-restore", img, hdr},
	} {
		r := expectCode(t, 1, args...)
		if !strings.Contains(r.stderr, "--batch-mode") {
			t.Errorf("%s: stderr %q lacks the --batch-mode hint", args[0], r.stderr)
		}
	}
	if fileSHA(t, img) != before {
		t.Fatal("a refused operation changed the image")
	}
	// Last slot: refused even in batch mode without --allow-last-slot.
	mustRun(t, "kill-slot", "-q", "-d", key[0], img, "1")
	r := expectCode(t, 1, "remove-key", "-q", "-d", key[0], img)
	if !strings.Contains(r.stderr, "--allow-last-slot") {
		t.Errorf("last slot: stderr %q", r.stderr)
	}
	expectCode(t, 1, "kill-slot", "-q", img, "0")
	expectCode(t, 0, "test-key", "-d", key[0], img)
	mustRun(t, "remove-key", "-q", "--allow-last-slot", "-d", key[0], img)
	expectCode(t, 1, "test-key", "-d", key[0], img) // no active slot, as cryptsetup
}

func TestKillSlotChecksRemainingKey(t *testing.T) {
	k := newKeyFixture(t)
	img, key := k.img, k.keys
	mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], fastIter, img)
	// The key of the slot being killed is not a remaining key.
	expectCode(t, 2, "kill-slot", "-q", "-d", key[1], img, "1")
	expectCode(t, 2, "kill-slot", "-q", "-d", key[5], img, "1")
	expectCode(t, 0, "test-key", "-d", key[1], "-S", "1", img)
	expectCode(t, 1, "kill-slot", "-q", "-d", key[0], img, "2") // inactive
	expectCode(t, 1, "kill-slot", "-q", "-d", key[0], img, "8")
	mustRun(t, "kill-slot", "-q", "-d", key[0], img, "1")
	expectCode(t, 2, "test-key", "-d", key[1], img)
}

func TestAddKeySlotErrors(t *testing.T) {
	k := newKeyFixture(t)
	img, key := k.img, k.keys
	expectCode(t, 2, "add-key", "-q", "-d", key[5], "--new-key-file", key[1], fastIter, img)
	expectCode(t, 1, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], "-S", "0", fastIter, img)
	expectCode(t, 1, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], "--pbkdf-force-iterations", "999", img)
	expectCode(t, 1, "add-key", "-q", "-d", "-", "--new-key-file", "-", img)
	for _, cmd := range []string{"add-key", "change-key"} {
		r := expectCode(t, 1, cmd, "-q", "-d", key[0], "--new-key-file", key[1], fastIter, img, key[2])
		if !strings.Contains(r.stderr, "not both") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s with two new keys: %q, want one line saying not both", cmd, r.stderr)
		}
	}
	for i := 1; i < 8; i++ {
		mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[i%6], fastIter, img)
	}
	r := expectCode(t, 1, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], fastIter, img)
	if !strings.Contains(r.stderr, "in use") {
		t.Errorf("full header: %q", r.stderr)
	}
	// change-key with every slot full overwrites in place, and only
	// with --batch-mode off a terminal.
	expectCode(t, 1, "change-key", "-d", key[3], "--new-key-file", key[5], fastIter, img)
	expectCode(t, 0, "test-key", "-d", key[3], "-S", "3", img)
	mustRun(t, "change-key", "-q", "-d", key[3], "-S", "3", "--new-key-file", key[5], fastIter, img)
	expectCode(t, 0, "test-key", "-d", key[5], "-S", "3", img)
	expectCode(t, 2, "test-key", "-d", key[3], "-S", "3", img)
}

func TestDumpVolumeKey(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	k := newKeyFixture(t)
	expectCode(t, 1, "dump", "--dump-volume-key", "-d", k.keys[0], k.img)
	expectCode(t, 2, "dump", "-q", "--dump-volume-key", "-d", k.keys[1], k.img)
	ours := mustRun(t, "dump", "-q", "--dump-volume-key", "-d", k.keys[0], k.img).stdout
	theirs := sh(t, cs, "luksDump", "-q", "--dump-volume-key", "-d", k.keys[0], k.img)
	want := volumeKeyLines(theirs)
	if want == "" || volumeKeyLines(ours) != want {
		t.Errorf("volume key differs:\nours:\n%s\ncryptsetup:\n%s", ours, theirs)
	}
}

// volumeKeyLines returns the hex bytes of luksDump --dump-volume-key output.
func volumeKeyLines(s string) string {
	var hex []string
	on := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "MK dump:") {
			on = true
			line = strings.TrimPrefix(line, "MK dump:")
		} else if on && !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			on = false
		}
		if on {
			hex = append(hex, strings.Fields(line)...)
		}
	}
	return strings.Join(hex, "")
}

func TestKeysRefuseLockedImage(t *testing.T) {
	k := newKeyFixture(t)
	hdr := filepath.Join(k.dir, "hdr")
	mustRun(t, "header-backup", k.img, hdr)
	f, err := os.Open(k.img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"add-key", "-q", "-d", k.keys[0], "--new-key-file", k.keys[1], fastIter, k.img},
		{"change-key", "-q", "-d", k.keys[0], "--new-key-file", k.keys[1], fastIter, k.img},
		{"kill-slot", "-q", k.img, "0", "--allow-last-slot"},
		{"header-restore", "-q", k.img, hdr},
		{"uuid", "-q", "--uuid", "11111111-2222-4333-8444-555555555555", k.img},
	} {
		if r := expectCode(t, exitBusy, args...); !strings.Contains(r.stderr, "is busy: opened read-write by pid") {
			t.Errorf("%s: %q", args[0], r.stderr)
		}
	}
	// Reading takes a shared lock, which an exclusive one stops too.
	expectCode(t, exitBusy, "test-key", "-d", k.keys[0], k.img)
}
