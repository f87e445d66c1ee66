package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// slotOut decodes the --json output of a key command.
func slotOut(t *testing.T, r result) slotJSON {
	t.Helper()
	var s slotJSON
	decodeOne(t, r.stdout, &s)
	if r.stderr != "" {
		t.Errorf("stderr %q with --json", r.stderr)
	}
	return s
}

func wantSlot(t *testing.T, got slotJSON, op, img string, slot int) {
	t.Helper()
	if got.MessageType != op || got.Image != img || got.KeySlot != slot {
		t.Errorf("%s --json: %+v, want image %s and key slot %d", op, got, img, slot)
	}
	if op != "change-key" && got.OldKeySlot != nil {
		t.Errorf("%s --json has old_key_slot %d", op, *got.OldKeySlot)
	}
}

func TestKeyCommandsJSON(t *testing.T) {
	k := newKeyFixture(t)
	img, key := k.img, k.keys

	// Without --json: the line for people on stderr, nothing on stdout.
	r := mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], "-S", "3", fastIter, img)
	if r.stdout != "" || !strings.Contains(r.stderr, "key slot 3 created") {
		t.Errorf("add-key: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	mustRun(t, "kill-slot", "-q", "-d", key[0], img, "3")

	wantSlot(t, slotOut(t, mustRun(t, "add-key", "--json", "-q", "-d", key[0], "--new-key-file", key[1], "-S", "3", fastIter, img)), "add-key", img, 3)
	wantSlot(t, slotOut(t, mustRun(t, "add-key", "--json", "-q", "-d", key[0], fastIter, img, key[2])), "add-key", img, 1)
	wantSlot(t, slotOut(t, mustRun(t, "test-key", "--json", "-d", key[1], img)), "test-key", img, 3)
	// --quiet silences the people's line, not the JSON asked for.
	wantSlot(t, slotOut(t, mustRun(t, "test-key", "--json", "--quiet", "-d", key[2], img)), "test-key", img, 1)

	// change-key: the new key goes to the first free slot (2), the old
	// slot (1) is removed.
	c := slotOut(t, mustRun(t, "change-key", "--json", "-q", "-d", key[2], "--new-key-file", key[3], fastIter, img))
	wantSlot(t, c, "change-key", img, 2)
	if c.OldKeySlot == nil || *c.OldKeySlot != 1 {
		t.Errorf("change-key --json: old_key_slot %v, want 1", c.OldKeySlot)
	}
	wantSlot(t, slotOut(t, mustRun(t, "test-key", "--json", "-d", key[3], img)), "test-key", img, 2)
	// A failure under --json prints the error object alone, no result.
	if r := expectCode(t, exitNoKey, "test-key", "--json", "-d", key[2], img); !strings.HasPrefix(r.stdout, `{"message_type":"error",`) ||
		!strings.HasSuffix(r.stdout, `"exit_code":2}`+"\n") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("test-key --json with a wrong key prints %q, want one error object", r.stdout)
	}

	wantSlot(t, slotOut(t, mustRun(t, "remove-key", "--json", "-q", "-d", key[3], img)), "remove-key", img, 2)
	wantSlot(t, slotOut(t, mustRun(t, "kill-slot", "--json", "-q", "-d", key[0], img, "3")), "kill-slot", img, 3)
	if r := expectCode(t, exitNoKey, "test-key", "-d", key[1], img); r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
	k.decryptsTo(t, key[0])
}

func TestChangeKeyInPlaceJSON(t *testing.T) {
	k := newKeyFixture(t)
	for i := 1; i < 8; i++ {
		mustRun(t, "add-key", "-q", "-d", k.keys[0], "--new-key-file", k.keys[i%6], fastIter, k.img)
	}
	c := slotOut(t, mustRun(t, "change-key", "--json", "-q", "-d", k.keys[0], "-S", "0", "--new-key-file", k.keys[5], fastIter, k.img))
	wantSlot(t, c, "change-key", k.img, 0)
	if c.OldKeySlot == nil || *c.OldKeySlot != 0 {
		t.Errorf("change-key in place --json: old_key_slot %v, want 0", c.OldKeySlot)
	}
}

func TestUUIDAndHeaderBackupJSON(t *testing.T) {
	k := newKeyFixture(t)
	text := strings.TrimSpace(mustRun(t, "uuid", k.img).stdout)
	var u uuidJSON
	decodeOne(t, mustRun(t, "uuid", "--json", k.img).stdout, &u)
	if u != (uuidJSON{"uuid", k.img, text}) {
		t.Errorf("uuid --json %+v, uuid prints %q", u, text)
	}
	// Setting: the UUID as stored (lower-case) is reported.
	u = uuidJSON{}
	decodeOne(t, mustRun(t, "uuid", "--json", "-q", "--uuid", "01234567-89AB-4CDE-8F01-23456789ABCD", k.img).stdout, &u)
	if u.UUID != "01234567-89ab-4cde-8f01-23456789abcd" || u.Image != k.img {
		t.Errorf("uuid --json --uuid: %+v", u)
	}
	if got := strings.TrimSpace(mustRun(t, "uuid", k.img).stdout); got != u.UUID {
		t.Errorf("uuid reads %q after setting %q", got, u.UUID)
	}

	out := filepath.Join(k.dir, "img.hdr")
	r := mustRun(t, "header-backup", "--json", k.img, out)
	var b headerBackupJSON
	decodeOne(t, r.stdout, &b)
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if b.MessageType != "header-backup" || b.Image != k.img || b.File != out || b.Bytes != st.Size() || r.stderr != "" {
		t.Errorf("header-backup --json %+v (stderr %q), the file has %d bytes", b, r.stderr, st.Size())
	}
}
