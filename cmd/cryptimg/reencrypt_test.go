package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

// fastDir is a temporary directory on tmpfs when there is one, so that the
// many fsyncs of the torture tests cost little.
func fastDir(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "cryptimg-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// plainSHA returns the sha256 of the plaintext of a raw image: the file
// itself if it is not LUKS, else its decrypted payload.
func plainSHA(t *testing.T, path string, pass []byte) (sum [32]byte, luks bool, digest [20]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := image.Open(f)
	if errors.Is(err, header.ErrNotLUKS) && !errors.Is(err, header.ErrMarked) {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			t.Fatal(err)
		}
		copy(sum[:], h.Sum(nil))
		return sum, false, digest
	}
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(pass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for off := e.PayloadOffset; off < e.FileSize; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), e.FileSize-off)]
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		k.Cipher.DecryptSectors(b, b, uint64(off-e.PayloadOffset)/512)
		h.Write(b)
	}
	copy(sum[:], h.Sum(nil))
	return sum, true, e.Header.(*header.LUKS1).MKDigest
}

func copyImage(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKillTorture kills reencrypt, encrypt --in-place and decrypt
// --in-place with SIGKILL at a uniformly random moment of a 64 MiB run, 30
// times each, resumes, and checks the plaintext every time.
func TestKillTorture(t *testing.T) {
	runs := 30
	if testing.Short() || raceEnabled {
		// The killed processes are not race-instrumented; the normal
		// run does all thirty.
		runs = 5
	}
	bin := binary(t)
	dir := fastDir(t)
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<20)
	want := fileSHA(t, plain)
	luks := filepath.Join(dir, "plain.luks")
	mustRun(t, "encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", plain, luks)
	_, _, digest0 := plainSHA(t, luks, []byte(testPassphrase))
	common := []string{"--key-file", key, "--hotzone-size", "1048576", "--progress", "none", "-q"}
	force := []string{"--pbkdf-force-iterations", "1000"}
	cases := []struct {
		name     string
		template string
		args     []string
		done     func(luks bool, digest [20]byte) bool // is a run that was not interrupted complete?
	}{
		{"reencrypt", luks, append([]string{"reencrypt"}, force...), func(l bool, d [20]byte) bool { return l && d != digest0 }},
		{"encrypt-in-place", plain, append([]string{"encrypt", "--in-place"}, force...), func(l bool, _ [20]byte) bool { return l }},
		{"decrypt-in-place", luks, []string{"decrypt", "--in-place"}, func(l bool, _ [20]byte) bool { return !l }},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".img")
			args := append(append(append([]string{}, c.args...), common...), img)
			// A clean run measures the duration to draw kill times from.
			copyImage(t, c.template, img)
			start := time.Now()
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			dur := time.Since(start)
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(time.Now().UnixNano())))
			midway := 0
			for i := range runs {
				copyImage(t, c.template, img)
				cmd := exec.Command(bin, args...)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(rng.Int64N(int64(dur))))
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				if _, err := os.Stat(img + image.JournalSuffix); err == nil {
					// Even runs resume with --resume, odd ones by running
					// the same command again. --resume refuses a journal
					// killed before it was complete (nothing had started).
					midway++
					rerun := i%2 == 1
					if !rerun {
						out, err := exec.Command(bin, append([]string{args[0], "--resume"}, args[1:]...)...).CombinedOutput()
						if err != nil && !strings.Contains(string(out), "no unfinished operation") {
							t.Fatalf("run %d: resume: %v\n%s", i, err, out)
						}
						rerun = err != nil
					}
					if rerun {
						if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
							t.Fatalf("run %d: rerun: %v\n%s", i, err, out)
						}
					}
				} else if _, l, d := plainSHA(t, img, []byte(testPassphrase)); !c.done(l, d) {
					// Killed before it started: run it again.
					if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
						t.Fatalf("run %d: rerun: %v\n%s", i, err, out)
					}
				}
				sum, l, d := plainSHA(t, img, []byte(testPassphrase))
				if sum != want || !c.done(l, d) {
					t.Fatalf("run %d: plaintext or state wrong after resume (luks %v)", i, l)
				}
				if _, err := os.Stat(img + image.JournalSuffix); err == nil {
					t.Fatalf("run %d: journal left behind", i)
				}
			}
			t.Logf("%s: %d runs killed (%d mid-operation, resumed), all plaintexts intact; clean run %v", c.name, runs, midway, dur.Round(time.Millisecond))
		})
	}
}

// interruptOp runs reencrypt, encrypt --in-place or decrypt --in-place
// in-process and cancels it after the first window, leaving an unfinished
// operation behind.
func interruptOp(t *testing.T, op image.Op, path, key string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := image.InPlaceOptions{Window: 1 << 20, Pipeline: image.Pipeline{Progress: func(done, _ int64) {
		if done > 0 {
			cancel()
		}
	}}}
	switch op {
	case image.OpReencrypt:
		_, err = image.Reencrypt(ctx, f, image.Sidecar(path), image.ReencryptOptions{
			Passphrases: [][]byte{[]byte(key)}, ForceIterations: 1000, InPlaceOptions: o})
	case image.OpEncrypt:
		_, err = image.EncryptInPlace(ctx, f, image.Sidecar(path), image.EncryptInPlaceOptions{
			Header: header.Params{ForceIterations: 1000}, Passphrase: []byte(key), InPlaceOptions: o})
	case image.OpDecrypt:
		_, err = image.DecryptInPlace(ctx, f, image.Sidecar(path), []byte(key), -1, o)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted %v: %v", op, err)
	}
}

// TestReencryptBusy: an unfinished reencryption is refused by cryptsetup
// and by every other cryptimg command (exit 5), and finished by --resume.
func TestReencryptBusy(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 8<<20)
	enc := filepath.Join(dir, "enc.luks")
	mustRun(t, "encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", plain, enc)
	if r := cryptimg(t, "", "reencrypt", "--resume", "--key-file", key, enc); r.code != 1 || !strings.Contains(r.stderr, "no unfinished operation") {
		t.Fatalf("--resume with nothing to resume: %d %s", r.code, r.stderr)
	}
	interruptOp(t, image.OpReencrypt, enc, testPassphrase)
	if err := exec.Command(cs, "isLuks", enc).Run(); err == nil {
		t.Fatal("cryptsetup isLuks accepts an image in reencryption")
	}
	if out, err := exec.Command(requireTool(t, "qemu-img"), "info", "--object", qemuSecret(key), "--image-opts", "driver=luks,key-secret=sec0,file.filename="+enc).CombinedOutput(); err == nil {
		t.Fatalf("qemu-img opens an image in reencryption:\n%s", out)
	}
	out := filepath.Join(dir, "out.raw")
	for _, args := range [][]string{
		{"dump", enc},
		{"decrypt", "--key-file", key, enc, out},
		{"decrypt", "--key-file", key, enc, "-"},
		{"decrypt", "--key-file", key, "--partition", "1", enc, out},
		{"clone", "--key-file", key, enc, out},
		{"verify", "--key-file", key, enc},
		{"ls", "--key-file", key, enc},
		{"add-key", "--key-file", key, "--new-key-file", key, enc},
		{"decrypt", "--in-place", "--key-file", key, enc},
		{"encrypt", "--in-place", "--key-file", key, enc},
	} {
		r := cryptimg(t, "", args...)
		if r.code != exitBusy {
			t.Errorf("%v: exit %d, want 5\n%s", args, r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "unfinished") {
			t.Errorf("%v: unclear message %q", args, r.stderr)
		}
	}
	if r := cryptimg(t, "", "reencrypt", "--key-file", writeFile(t, filepath.Join(dir, "wrong"), "wrong"), enc); r.code != exitNoKey {
		t.Fatalf("resume with a wrong key: exit %d %s", r.code, r.stderr)
	}
	mustRun(t, "reencrypt", "--resume", "--key-file", key, enc)
	mustRun(t, "decrypt", "--key-file", key, enc, out)
	sameContent(t, plain, out)
	sh(t, cs, "isLuks", enc)
}

// TestReencryptConfirm: removing slots needs --batch-mode off a terminal.
func TestReencryptConfirm(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second key")
	plain := randomFile(t, dir, "plain.raw", 2<<20)
	enc := filepath.Join(dir, "enc.luks")
	mustRun(t, "encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", plain, enc)
	mustRun(t, "add-key", "--key-file", key, "--new-key-file", key2, "--pbkdf-force-iterations", "1000", enc)
	before, _ := os.ReadFile(enc)
	if r := cryptimg(t, "", "reencrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", enc); r.code != 1 || !strings.Contains(r.stderr, "--batch-mode") {
		t.Fatalf("non-terminal without --batch-mode: %d %s", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(enc); !bytes.Equal(before, after) {
		t.Fatal("refused reencrypt changed the image")
	}
	r := mustRun(t, "reencrypt", "-q", "--json", "--key-file", key2, "--pbkdf-force-iterations", "1000", enc)
	if !strings.Contains(r.stdout, `"kept_slots":[1]`) || !strings.Contains(r.stdout, `"removed_slots":[0]`) {
		t.Fatalf("summary: %s", r.stdout)
	}
	if r := cryptimg(t, "", "test-key", "--key-file", key, enc); r.code != exitNoKey {
		t.Fatalf("removed key still works: %d", r.code)
	}
}

// TestReencryptInterop: reencrypted raw LUKS and qcow2+LUKS images are
// decrypted byte-exact by qemu-img and unlocked by cryptsetup with every
// kept key; in-place encryption and decryption round-trip with both.
func TestReencryptInterop(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second key")
	plain := randomFile(t, dir, "plain.raw", 16<<20)

	// Raw: cryptsetup formats, cryptimg reencrypts (new key size and
	// hash), cryptsetup and qemu read it.
	enc := filepath.Join(dir, "enc.luks")
	copyImage(t, plain, enc)
	mustRun(t, "encrypt", "--in-place", "--key-file", key, "--pbkdf-force-iterations", "1000", enc)
	sh(t, cs, "luksAddKey", "--batch-mode", "--key-file", key, "--pbkdf-force-iterations", "1000", enc, key2)
	_, _, d0 := plainSHA(t, enc, []byte(testPassphrase))
	mustRun(t, "reencrypt", "--key-file", key, "--keep-key-file", key2, "--key-size", "128", "--hash", "sha512", "--pbkdf-force-iterations", "1000", enc)
	if _, _, d1 := plainSHA(t, enc, []byte(testPassphrase)); d1 == d0 {
		t.Fatal("master key digest unchanged")
	}
	for _, k := range []string{key, key2} {
		sh(t, cs, "open", "--test-passphrase", "--key-file", k, enc)
	}
	if dump := sh(t, cs, "luksDump", enc); !strings.Contains(dump, "MK bits:       \t128") || !strings.Contains(dump, "Hash spec:     \tsha512") {
		t.Fatalf("luksDump:\n%s", dump)
	}
	back := filepath.Join(dir, "back.raw")
	sh(t, qi, "convert", "--object", qemuSecret(key2), "--image-opts", "driver=luks,key-secret=sec0,file.filename="+enc, "-O", "raw", back)
	sameContent(t, plain, back)
	// In-place decryption and encryption, each interrupted once: the
	// half-converted image is not LUKS to cryptsetup.
	interruptOp(t, image.OpDecrypt, enc, "second key")
	if err := exec.Command(cs, "isLuks", enc).Run(); err == nil {
		t.Fatal("cryptsetup isLuks accepts an image in in-place decryption")
	}
	mustRun(t, "decrypt", "--in-place", "--key-file", key2, enc)
	sameContent(t, plain, enc)
	interruptOp(t, image.OpEncrypt, enc, testPassphrase)
	if err := exec.Command(cs, "isLuks", enc).Run(); err == nil {
		t.Fatal("cryptsetup isLuks accepts an image in in-place encryption")
	}
	mustRun(t, "encrypt", "--in-place", "--key-file", key, enc)
	sh(t, cs, "open", "--test-passphrase", "--key-file", key, enc)
	sh(t, qi, "convert", "--object", qemuSecret(key), "--image-opts", "driver=luks,key-secret=sec0,file.filename="+enc, "-O", "raw", back+"2")
	sameContent(t, plain, back+"2")

	// qcow2: qemu-img creates and fills it, cryptimg reencrypts, qemu
	// reads it back and checks it.
	q := filepath.Join(dir, "enc.qcow2")
	retry(t, qi, "convert", "--object", qemuSecret(key), "-O", "qcow2", "-o", qemuQcow2LUKSOpts, plain, q)
	interruptOp(t, image.OpReencrypt, q, testPassphrase)
	if out, err := exec.Command(qi, "info", "--object", qemuSecret(key), "--image-opts", qcowOpts(q)).CombinedOutput(); err == nil {
		t.Fatalf("qemu-img opens a qcow2 image in reencryption:\n%s", out)
	}
	mustRun(t, "reencrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", q)
	qemuCheck(t, qi, key, q, true)
	qemuCompare(t, qi, key, qcowOpts(q), rawOpts(plain))
}

// A raw image halfway through encrypt --in-place is neither plaintext nor a
// LUKS image: copying commands refuse it as busy instead of reading it.
func TestInPlaceEncryptPendingInput(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := randomFile(t, dir, "img.raw", 8<<20)
	interruptOp(t, image.OpEncrypt, img, testPassphrase)
	for _, args := range [][]string{
		{"encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", img, filepath.Join(dir, "o1")},
		{"decrypt", "--key-file", key, img, filepath.Join(dir, "o2")},
		{"encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", "--partition", "1", img, filepath.Join(dir, "o3")},
		{"encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", img, "-"},
	} {
		r := cryptimg(t, "", args...)
		if r.code != exitBusy || !strings.Contains(r.stderr, "unfinished") {
			t.Errorf("%v: exit %d, want 5 with a clear message: %q", args[0], r.code, r.stderr)
		}
	}
	noFile(t, filepath.Join(dir, "o1"))
	noFile(t, filepath.Join(dir, "o2"))
	noFile(t, filepath.Join(dir, "o3"))
}

// TestRerunAfterSuccess: a pipeline step retried after it had finished must
// not convert the image a second time. encrypt --in-place of a LUKS image,
// encrypt of a LUKS input and decrypt --in-place of a plaintext are refused
// and change nothing; --force still encrypts a LUKS input on purpose.
func TestRerunAfterSuccess(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "rerun passphrase")
	plain := randomFile(t, dir, "plain.raw", 3<<20)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			img := filepath.Join(dir, typ+".img")
			copyImage(t, plain, img)
			args := []string{"encrypt", "--in-place", "-d", key, "--type", typ, "--pbkdf-force-iterations", "1000"}
			if typ == "luks2" {
				args = append(args, "--pbkdf", "pbkdf2")
			}
			mustRun(t, append(args, img)...)
			before := fileSHA(t, img)
			r := cryptimg(t, "", append(args, img)...)
			if r.code != 1 || !strings.Contains(r.stderr, "already a LUKS image") || fileSHA(t, img) != before {
				t.Fatalf("encrypt --in-place again: exit %d, image changed %v\n%s", r.code, fileSHA(t, img) != before, r.stderr)
			}
			if _, err := os.Stat(img + image.JournalSuffix); err == nil {
				t.Fatal("the refused rerun left a journal")
			}

			out := filepath.Join(dir, typ+".twice")
			r = cryptimg(t, "", "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", img, out)
			if r.code != 1 || !strings.Contains(r.stderr, "--force") {
				t.Fatalf("encrypt of a LUKS input: exit %d\n%s", r.code, r.stderr)
			}
			if typ == "luks2" {
				// A LUKS2 image whose primary copy is lost is still LUKS:
				// its secondary copy is found, and repair would restore it.
				lost := filepath.Join(dir, "lost-primary.img")
				copyImage(t, img, lost)
				f, err := os.OpenFile(lost, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteAt(make([]byte, 4096), 0)
				f.Close()
				r = cryptimg(t, "", "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", lost, out+"2")
				if r.code != 1 || !strings.Contains(r.stderr, "already a LUKS image") {
					t.Fatalf("encrypt of a LUKS2 input with a lost primary: exit %d\n%s", r.code, r.stderr)
				}
			}
			noFile(t, out)
			mustRun(t, "encrypt", "--force", "-d", key, "--pbkdf-force-iterations", "1000", img, out)

			mustRun(t, "decrypt", "--in-place", "-d", key, img)
			sameContent(t, plain, img)
			r = cryptimg(t, "", "decrypt", "--in-place", "-d", key, img)
			if r.code == 0 || fileSHA(t, img) != fileSHA(t, plain) {
				t.Fatalf("decrypt --in-place again: exit %d\n%s", r.code, r.stderr)
			}
		})
	}
	// With a detached header the data carries no magic: the header file
	// tells that the run is done.
	img := filepath.Join(dir, "detached.img")
	hdr := filepath.Join(dir, "detached.hdr")
	copyImage(t, plain, img)
	args := []string{"encrypt", "--in-place", "--header", hdr, "-d", key, "--pbkdf-force-iterations", "1000", img}
	mustRun(t, args...)
	before := fileSHA(t, img)
	r := cryptimg(t, "", args...)
	if r.code == 0 || fileSHA(t, img) != before {
		t.Fatalf("encrypt --in-place --header again: exit %d, image changed %v\n%s", r.code, fileSHA(t, img) != before, r.stderr)
	}
}
