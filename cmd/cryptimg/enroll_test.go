package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/vectors/peer"
)

var recoveryKeyRE = regexp.MustCompile(`^[cbdefghijklnrtuv]{8}(-[cbdefghijklnrtuv]{8}){7}$`)

// luks2Small makes a LUKS2 image of 1 MiB of data with a cheap pbkdf2 slot 0
// opened by key (with --header hdr when hdr is not "": then the data file).
func luks2Small(t *testing.T, dir, name, key, hdr string, typ string) string {
	t.Helper()
	src := randomFile(t, dir, name+".plain", 1<<20)
	img := filepath.Join(dir, name)
	args := []string{"encrypt", "-d", key, "--type", typ, "--pbkdf", "pbkdf2", fastIter}
	if hdr != "" {
		args = append(args, "--header", hdr)
	}
	mustRun(t, append(args, src, img)...)
	return img
}

// recoveryKeyFile checks that out is one recovery key line and writes the
// key, without the newline, to a new 0600 file.
func recoveryKeyFile(t *testing.T, dir, out string) string {
	t.Helper()
	k := strings.TrimSuffix(out, "\n")
	if strings.Count(out, "\n") != 1 || !recoveryKeyRE.MatchString(k) {
		t.Fatalf("stdout %q is not one recovery key line", out)
	}
	if raw, err := token.DecodeRecoveryKey([]byte(k)); err != nil || len(raw) != 32 {
		t.Fatalf("recovery key %q: %v", k, err)
	}
	return writeFile(t, filepath.Join(dir, "rk-"+k[:8]), k)
}

// readLUKS2 reads the LUKS2 header of path (a raw image or a detached
// header file).
func readLUKS2(t *testing.T, path string) *header.LUKS2 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, err := header.Read(f, 0, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h.(*header.LUKS2)
}

// TestEnrollRecoveryKey: enroll --recovery-key prints one key in systemd's
// format on stdout, and adds key slot 1 with systemd's minimal KDF (pbkdf2,
// sha512, 1000 iterations, AF hash sha512) and the token
// {"type":"systemd-recovery","keyslots":["1"]}: cryptsetup accepts the key
// and luksDump shows the token on that slot, and cryptimg test-key opens
// slot 1 with it; dump prints what luksDump prints. With --json the key is in the object and not printed
// apart; --wipe-slot recovery then removes the first recovery slot and its
// token, not the new one.
func TestEnrollRecoveryKey(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")

	ref := img + ".systemd"
	copyFile(t, img, ref)
	seq := readLUKS2(t, img).SeqID()
	r := mustRun(t, "enroll", "-d", key, "--recovery-key", img)
	rk := recoveryKeyFile(t, dir, r.stdout)
	if got := readLUKS2(t, img).SeqID(); got != seq+1 {
		t.Errorf("seqid %d after %d: the slot and the token are not one update", got, seq)
	}
	if strings.Contains(r.stderr, strings.TrimSpace(r.stdout)) {
		t.Errorf("the key is also on stderr: %s", r.stderr)
	}
	h := readLUKS2(t, img)
	k := h.Keyslots[1]
	if k == nil {
		t.Fatal("no key slot 1")
	}
	if k.KDF.Type != "pbkdf2" || k.KDF.Hash != "sha512" || k.KDF.Iterations != 1000 || k.AF.Hash != "sha512" {
		t.Fatalf("key slot 1: kdf %s %s %d, AF hash %s; want systemd's pbkdf2 sha512 1000, AF sha512", k.KDF.Type, k.KDF.Hash, k.KDF.Iterations, k.AF.Hash)
	}
	js, ok := h.TokenJSON(0)
	var tok map[string]any
	if !ok || json.Unmarshal(js, &tok) != nil || len(tok) != 2 || tok["type"] != "systemd-recovery" || !reflectEqual(tok["keyslots"], []any{"1"}) {
		t.Fatalf("token 0: %s", js)
	}
	sh(t, cs, "open", "--test-passphrase", "--key-slot", "1", "--key-file", rk, img)
	dump := sh(t, cs, "luksDump", img)
	if !regexp.MustCompile(`Tokens:\n  0: systemd-recovery\n\tKeyslot:\s+1\n`).MatchString(dump) {
		t.Errorf("luksDump shows no systemd-recovery token on key slot 1:\n%s", dump)
	}
	// systemd-cryptenroll's own enrollment of the same image: the same
	// keyslot but for its salt, and the same token.
	if sd, err := exec.LookPath("systemd-cryptenroll"); err == nil {
		if out, err := exec.Command(sd, "--unlock-key-file="+key, "--recovery-key", ref).CombinedOutput(); err != nil {
			t.Fatalf("systemd-cryptenroll --recovery-key: %v\n%s", err, out)
		}
		sdh := readLUKS2(t, ref)
		a, b := *sdh.Keyslots[1], *h.Keyslots[1]
		a.KDF.Salt, b.KDF.Salt = nil, nil
		if fmt.Sprintf("%+v %+v %+v %v %d", a.KDF, a.AF, a.Area, a.Priority, a.KeySize) != fmt.Sprintf("%+v %+v %+v %v %d", b.KDF, b.AF, b.Area, b.Priority, b.KeySize) {
			t.Errorf("key slot 1 differs from systemd-cryptenroll's:\n%+v\nwant\n%+v", b, a)
		}
		sdjs, _ := sdh.TokenJSON(0)
		var sdtok map[string]any
		if json.Unmarshal(sdjs, &sdtok) != nil || !reflectEqual(tok, sdtok) {
			t.Errorf("token %s, systemd-cryptenroll's %s", js, sdjs)
		}
	} else if peer.InCI() {
		t.Fatal("systemd-cryptenroll is required in CI (Debian package systemd)")
	}
	if got := mustRun(t, "test-key", "-d", rk, img).stderr; !strings.Contains(got, "key slot 1") {
		t.Errorf("test-key with the recovery key: %s", got)
	}
	if d := mustRun(t, "dump", img).stdout; d != dump {
		t.Errorf("dump differs from luksDump:\n%s\nwant:\n%s", d, dump)
	}

	// --json, through --unlock-key-file, and the first recovery slot wiped.
	r = mustRun(t, "enroll", "--unlock-key-file", key, "--recovery-key", "--wipe-slot", "recovery", "--json", img)
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("--json output %q: %v", r.stdout, err)
	}
	want := map[string]any{"message_type": "enroll", "image": img, "key_slot": 2.0, "token_id": 1.0, "token_type": "systemd-recovery",
		"recovery_key": out["recovery_key"], "wiped_slots": []any{1.0}, "wiped_tokens": []any{0.0}}
	if !reflectEqual(out, want) {
		t.Errorf("--json: %v\nwant %v", out, want)
	}
	rk2 := recoveryKeyFile(t, dir, out["recovery_key"].(string)+"\n")
	if strings.Contains(r.stderr, out["recovery_key"].(string)) {
		t.Error("the key is also on stderr")
	}
	if c := cryptimg(t, "", "test-key", "-d", rk, img).code; c != exitNoKey {
		t.Errorf("the wiped recovery key: test-key exit %d, want %d", c, exitNoKey)
	}
	mustRun(t, "test-key", "-d", rk2, "-S", "2", img)
	sh(t, cs, "open", "--test-passphrase", "--key-file", rk2, img)
	h = readLUKS2(t, img)
	if h.SlotActive(1) || h.ActiveSlots() != 2 || len(h.Tokens) != 1 || h.Tokens[1] == nil || !slices.Equal(h.Tokens[1].Keyslots, []string{"2"}) {
		t.Errorf("after the wipe: slots %d, tokens %v", h.ActiveSlots(), h.Tokens)
	}
}

func reflectEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestEnrollDetachedAndLUKS1: with --header the slot and token go into the
// header file, the data file is not written, and cryptsetup opens the
// header with the key; a LUKS1 image is refused with exit 1, a message
// that LUKS1 has no tokens and the convert hint, and is left unchanged.
func TestEnrollDetachedAndLUKS1(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	hdr := filepath.Join(dir, "img.hdr")
	data := luks2Small(t, dir, "img.data", key, hdr, "luks2")
	before := fileSHA(t, data)
	r := mustRun(t, "enroll", "--header", hdr, "-d", key, "--recovery-key", data)
	rk := recoveryKeyFile(t, dir, r.stdout)
	if fileSHA(t, data) != before {
		t.Error("the data file changed")
	}
	sh(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", rk, data)
	if dump := sh(t, cs, "luksDump", hdr); !strings.Contains(dump, "0: systemd-recovery") {
		t.Errorf("luksDump of the header shows no token:\n%s", dump)
	}
	mustRun(t, "test-key", "--header", hdr, "-d", rk, data)

	l1 := luks2Small(t, dir, "img.luks1", key, "", "luks1")
	before = fileSHA(t, l1)
	r = cryptimg(t, "", "enroll", "-d", key, "--recovery-key", l1)
	if r.code != exitFailure || !strings.Contains(r.stderr, "LUKS1 headers have no tokens") || !strings.Contains(r.stderr, "cryptimg convert --type luks2") || r.stdout != "" {
		t.Errorf("LUKS1: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if fileSHA(t, l1) != before {
		t.Error("the LUKS1 image changed")
	}
}

// wipeImage makes the image of the wipe tests: key slots 0 and 1 are
// passwords, 2 a recovery key (token 0), 3 named by a systemd-tpm2 token
// (1), 4 and 5 both by one systemd-fido2 token (2); 6 opens with an empty
// passphrase.
func wipeImage(t *testing.T, dir string) (img, key string) {
	t.Helper()
	key = writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img = luks2Small(t, dir, "wipe.luks2", key, "", "luks2")
	for i := 1; i <= 5; i++ {
		if i == 2 {
			mustRun(t, "enroll", "-d", key, "--recovery-key", img)
			continue
		}
		nk := writeFile(t, filepath.Join(dir, "key"+strconv.Itoa(i)), testPassphrase+strconv.Itoa(i))
		mustRun(t, "add-key", "-q", "-d", key, "--new-key-file", nk, "--pbkdf", "pbkdf2", fastIter, img)
	}
	for _, js := range []string{`{"type":"systemd-tpm2","keyslots":["3"]}`, `{"type":"systemd-fido2","keyslots":["4","5"]}`} {
		mustRun(t, "token", "import", "--json-file", writeFile(t, filepath.Join(dir, "tok.json"), js), img)
	}
	// Slot 6 opens with an empty passphrase, which no command makes.
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := image.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock([]byte(testPassphrase), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	if err := e.Apply(e.Header.(*header.LUKS2).AddSlot(6, []byte{}, k.VolumeKey(), header.KDF{Type: "pbkdf2", Iterations: header.MinIterations}, nil)); err != nil {
		t.Fatal(err)
	}
	return img, key
}

// wipeCases are --wipe-slot lists and the slots and tokens that go, by
// systemd-cryptenroll's rules (src/cryptenroll/cryptenroll-wipe.c), on
// wipeImage; "" slots means refused.
var wipeCases = []struct {
	list           string
	slots, tokens  []int
	enrollFirst    bool
	wantErrContain string
}{
	{list: "1", slots: []int{1}},
	{list: "password", slots: []int{0, 1, 6}},
	{list: "recovery", slots: []int{2}, tokens: []int{0}},
	{list: "4", slots: []int{4, 5}, tokens: []int{2}},
	{list: "tpm2,fido2", slots: []int{3, 4, 5}, tokens: []int{1, 2}},
	{list: "0,password,recovery", slots: []int{0, 1, 2, 6}, tokens: []int{0}},
	{list: "empty", slots: []int{6}},
	{list: "empty,4", slots: []int{4, 5, 6}, tokens: []int{2}},
	{list: "all", wantErrContain: "would leave no key slot"},
	{list: "empty,all", wantErrContain: "would leave no key slot"},
	{list: "all", enrollFirst: true, slots: []int{0, 1, 2, 3, 4, 5, 6}, tokens: []int{0, 1, 2}},
}

// TestEnrollWipeSlot: --wipe-slot removes the slots and tokens of each
// case of wipeCases in one header update, leaves the others opening, and
// refuses a wipe of every slot; bad lists are usage errors; an inactive
// slot is refused before anything is written. With systemd-cryptenroll
// installed, its own --wipe-slot leaves the same slots and tokens.
func TestEnrollWipeSlot(t *testing.T) {
	dir := t.TempDir()
	base, key := wipeImage(t, dir)
	sd, _ := exec.LookPath("systemd-cryptenroll")
	if sd == "" && peer.InCI() {
		t.Fatal("systemd-cryptenroll is required in CI (Debian package systemd)")
	}
	for i, c := range wipeCases {
		t.Run(strings.ReplaceAll(c.list, ",", "+")+map[bool]string{true: "-enroll"}[c.enrollFirst], func(t *testing.T) {
			img := filepath.Join(dir, "case"+strconv.Itoa(i))
			copyFile(t, base, img)
			before := readLUKS2(t, img)
			args := []string{"enroll", "--wipe-slot", c.list, "--json", img}
			if c.enrollFirst {
				args = append(args, "-d", key, "--recovery-key")
			}
			r := cryptimg(t, "", args...)
			if c.wantErrContain != "" {
				if r.code != exitFailure || !strings.Contains(r.stderr, c.wantErrContain) {
					t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
				}
				if readLUKS2(t, img).SeqID() != before.SeqID() {
					t.Error("the refused wipe wrote the header")
				}
				if sd != "" && !c.enrollFirst {
					if out, err := exec.Command(sd, "--wipe-slot="+c.list, img).CombinedOutput(); err == nil {
						t.Errorf("systemd-cryptenroll --wipe-slot=%s does not refuse:\n%s", c.list, out)
					}
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var out enrollJSON
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out.WipedSlots, orEmpty(c.slots)) || !slices.Equal(out.WipedTokens, orEmpty(c.tokens)) {
				t.Errorf("wiped slots %v tokens %v, want %v %v", out.WipedSlots, out.WipedTokens, c.slots, c.tokens)
			}
			h := readLUKS2(t, img)
			for n := range 7 {
				if h.SlotActive(n) == slices.Contains(c.slots, n) {
					t.Errorf("key slot %d active %v after wiping %v", n, h.SlotActive(n), c.slots)
				}
			}
			for id := range 3 {
				if _, ok := h.Tokens[id]; ok == slices.Contains(c.tokens, id) {
					t.Errorf("token %d present %v after wiping %v", id, ok, c.tokens)
				}
			}
			if len(c.slots) > 0 && h.SeqID() != before.SeqID()+1+map[bool]uint64{true: 1}[c.enrollFirst] {
				t.Errorf("seqid %d after %d: not one update for the wipe", h.SeqID(), before.SeqID())
			}
			if c.enrollFirst {
				if out.KeySlot == nil || h.ActiveSlots() != 1 || !h.SlotActive(*out.KeySlot) || len(h.Tokens) != 1 {
					t.Errorf("the enrolled slot did not stay alone: %+v", out)
				}
				mustRun(t, "test-key", "-d", writeFile(t, filepath.Join(dir, "rk"+strconv.Itoa(i)), out.RecoveryKey), img)
				return
			}
			if !slices.Contains(c.slots, 0) {
				mustRun(t, "test-key", "-d", key, "-S", "0", img)
			}
			if sd == "" {
				return
			}
			// systemd-cryptenroll's own wipe of the same list.
			ref := img + ".systemd"
			copyFile(t, base, ref)
			if out, err := exec.Command(sd, "--wipe-slot="+c.list, ref).CombinedOutput(); err != nil {
				t.Fatalf("systemd-cryptenroll --wipe-slot=%s: %v\n%s", c.list, err, out)
			}
			sdh := readLUKS2(t, ref)
			for n := range 7 {
				if sdh.SlotActive(n) != h.SlotActive(n) {
					t.Errorf("key slot %d: systemd-cryptenroll leaves it active %v, cryptimg %v", n, sdh.SlotActive(n), h.SlotActive(n))
				}
			}
			for id := range 3 {
				_, a := sdh.Tokens[id]
				_, b := h.Tokens[id]
				if a != b {
					t.Errorf("token %d: systemd-cryptenroll leaves it %v, cryptimg %v", id, a, b)
				}
			}
		})
	}
	img := filepath.Join(dir, "bad")
	copyFile(t, base, img)
	before := fileSHA(t, img)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--wipe-slot", "bogus"}, "not a slot number"},
		{[]string{"--wipe-slot", "32"}, "out of range"},
		{[]string{}, "enroll needs --recovery-key, --tpm2-device-key, --tang-adv"},
		{[]string{"--wipe-slot", "7"}, "key slot 7: key slot is not active"},
		{[]string{"--wipe-slot", "7", "-d", key, "--recovery-key"}, "key slot 7: key slot is not active"},
	} {
		r := cryptimg(t, "", append(append([]string{"enroll"}, c.args...), img)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %s", c.args, r.code, r.stderr)
		}
	}
	if fileSHA(t, img) != before {
		t.Error("a refused enroll changed the image")
	}
}

func orEmpty(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// TestEnrollTerminalNote: on a terminal (script(1) gives one) stderr says
// what the key is and to keep it safe, as systemd-cryptenroll does, while
// the key itself goes only to stdout; off a terminal stderr has no note.
func TestEnrollTerminalNote(t *testing.T) {
	sc, err := exec.LookPath("script")
	if err != nil {
		t.Skip("skipping: no script(1) to run cryptimg on a terminal")
	}
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	kf := filepath.Join(dir, "rk.out")
	run := fmt.Sprintf("'%s' enroll -d '%s' --recovery-key '%s' > '%s'", binary(t), key, img, kf)
	out, err := exec.Command(sc, "-qec", run, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(kf)
	if err != nil {
		t.Fatal(err)
	}
	rk := recoveryKeyFile(t, dir, string(b))
	k, _ := os.ReadFile(rk)
	if !strings.Contains(string(out), "A secret recovery key has been generated") || !strings.Contains(string(out), "Keep it in a safe place") {
		t.Errorf("no note on the terminal:\n%s", out)
	}
	if strings.Contains(string(out), string(k)) {
		t.Errorf("the key is on the terminal too:\n%s", out)
	}
	if r := mustRun(t, "enroll", "-d", key, "--recovery-key", img); strings.Contains(r.stderr, "secret recovery key") {
		t.Errorf("a note off a terminal: %s", r.stderr)
	}
}

// TestEnrollWipeSlotCompletion: the shell completes --wipe-slot's words.
func TestEnrollWipeSlotCompletion(t *testing.T) {
	got := completions(t, "enroll", "--wipe-slot", "")
	for _, w := range []string{"all", "empty", "password", "recovery", "tpm2", "fido2", "pkcs11"} {
		if !slices.Contains(got, w) {
			t.Errorf("completing --wipe-slot: %q, want %q among them", got, w)
		}
	}
}
