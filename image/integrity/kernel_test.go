package integrity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/vectors/kernel"
)

// TestKernelFormatAndJournal is the oracle for this package, in one boot
// of the Debian 6.1 kernel with cryptsetup 2.6.1:
//
//   - cryptsetup formats files of several sizes, block sizes and ciphers
//     (--integrity hmac-sha256, no wipe); on the host the superblock and
//     journal bytes equal what New and WriteJournal generate for the same
//     size, Read's geometry equals New's, and the dm device is
//     DataSectors long;
//   - on a file whose superblock and journal the host wrote (the LUKS2
//     header copied from a format of the same size), the kernel opens the
//     device, takes a 64 KiB write through the journal (dd bs=4096
//     conv=fsync) and reads it back; a raw copy taken while the device is
//     open holds the committed journal a crash would leave, and replaying
//     it on the host gives the file the kernel leaves after a clean close,
//     whose journal CheckJournal accepts: all entries unused, sequences
//     no longer uniform.
func TestKernelFormatAndJournal(t *testing.T) {
	m := kernel.Require(t)
	dir := t.TempDir()
	b := kernel.NewBatch()
	key := b.File("key", []byte("integrity oracle key file"))

	const mib = 1 << 20
	type format struct {
		name   string
		size   int64
		cipher string
		b      int
		path   string
		dev    string
	}
	formats := []*format{
		{name: "essiv-512-32M", size: 32 * mib, cipher: "aes-cbc-essiv:sha256", b: 512},
		{name: "essiv-4096-32M", size: 32 * mib, cipher: "aes-cbc-essiv:sha256", b: 4096},
		{name: "xts-512-32M", size: 32 * mib, cipher: "aes-xts-plain64", b: 512},
		{name: "essiv-512-70M3", size: 70*mib + 3*512, cipher: "aes-cbc-essiv:sha256", b: 512},
		{name: "essiv-4096-70M3", size: 70*mib + 3*512, cipher: "aes-cbc-essiv:sha256", b: 4096},
		{name: "xts-4096-70M3", size: 70*mib + 3*512, cipher: "aes-xts-plain64", b: 4096},
	}
	file := func(name string, size int64) string {
		p := filepath.Join(dir, name+".img")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return p
	}
	for i, f := range formats {
		f.path = file(f.name, f.size)
		f.dev = b.Disk(f.path)
		extra := ""
		if f.b != 512 {
			extra = " --sector-size " + strconv.Itoa(f.b)
		}
		name := "f" + strconv.Itoa(i)
		b.Check("format-"+f.name, fmt.Sprintf(`cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file %s --cipher %s --key-size 256 --integrity hmac-sha256 --integrity-no-wipe%s %s
unlock %s %s %s --readonly
blockdev --getsz /dev/mapper/%s
lock %s`, key, f.cipher, extra, f.dev, f.dev, name, key, name, name))
	}

	// The write cases: host metadata on w, the header from a format of the
	// same size, the crash copy on x.
	pattern := make([]byte, 64<<10)
	for i := range pattern {
		pattern[i] = byte(7*(i/512) + i)
	}
	patternPath := b.File("pattern", pattern)
	const seekBlocks = 5 // dd bs=4096 seek: logical sector 40
	type write struct {
		from   *format
		g      *Geometry
		w, x   string
		wd, xd string
	}
	writes := []*write{{from: formats[0]}, {from: formats[4]}}
	for i, c := range writes {
		c.w = file(fmt.Sprintf("write-%d", c.from.b), c.from.size)
		c.x = file(fmt.Sprintf("crash-%d", c.from.b), c.from.size)
		g, err := New(uint64(c.from.size/512), segStart, 32, c.from.b)
		if err != nil {
			t.Fatal(err)
		}
		c.g = g
		f, err := os.OpenFile(c.w, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.WriteMetadata(f); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		c.wd, c.xd = b.Disk(c.w), b.Disk(c.x)
		name := "w" + strconv.Itoa(i)
		b.Check(fmt.Sprintf("write-%d", c.from.b), fmt.Sprintf(`dd if=%[1]s of=%[2]s bs=1M count=16 conv=fsync 2>/dev/null
unlock %[2]s %[3]s %[4]s
blockdev --getsz /dev/mapper/%[3]s
dd if=%[5]s of=/dev/mapper/%[3]s bs=4096 seek=%[7]d conv=fsync 2>/dev/null
blockdev --flushbufs %[2]s
echo 3 > /proc/sys/vm/drop_caches
dd if=%[2]s of=%[6]s bs=1M conv=fsync 2>/dev/null
dd if=/dev/mapper/%[3]s bs=4096 skip=%[7]d count=16 2>/dev/null | sha256sum | cut -d' ' -f1
lock %[3]s`, c.from.dev, c.wd, name, key, patternPath, c.xd, seekBlocks))
	}

	r := m.RunBatch(t, b)

	for _, f := range formats {
		out := r.Want(t, "format-"+f.name)
		d := uint64(f.size / 512)
		want, err := New(d, segStart, 32, f.b)
		if err != nil {
			t.Fatal(err)
		}
		if last := lastLine(out); last != strconv.FormatUint(want.DataSectors(), 10) {
			t.Errorf("%s: dm device of %q sectors, want %d", f.name, last, want.DataSectors())
		}
		img, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := img[segStart*512:][:SuperblockSize]; !bytes.Equal(got, want.Superblock().Bytes()) {
			t.Errorf("%s: kernel superblock %x, generated %x", f.name, got[:64], want.Superblock().Bytes()[:64])
		}
		gen := &memFile{}
		if err := want.WriteJournal(gen); err != nil {
			t.Fatal(err)
		}
		jo, jn := want.JournalOffset(), want.JournalBytes()
		if got := img[jo:][:jn]; !bytes.Equal(got, gen.at(jo, jn)) {
			t.Errorf("%s: kernel journal differs from the generated one from byte %d", f.name, jo+int64(firstDiff(got, gen.at(jo, jn))))
		}
		g, sb, err := Read(bytes.NewReader(img), segStart, d)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if *g != *want || *sb != *want.Superblock() {
			t.Errorf("%s: Read gives %+v, New %+v", f.name, g, want)
		}
		if err := g.Check(32, f.b); err != nil {
			t.Errorf("%s: %v", f.name, err)
		}
		if st, err := g.CheckJournal(bytes.NewReader(img)); err != nil || !st.Clean() {
			t.Errorf("%s: CheckJournal %+v %v", f.name, st, err)
		}
	}

	sum := sha256.Sum256(pattern)
	for _, c := range writes {
		name := fmt.Sprintf("write-%d", c.from.b)
		out := strings.Split(r.Want(t, name), "\n")
		if len(out) < 2 || out[0] != strconv.FormatUint(c.g.DataSectors(), 10) || out[len(out)-1] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: kernel output %q; want %d sectors and the pattern's sha256 %x", name, out, c.g.DataSectors(), sum)
			continue
		}
		closed, err := os.ReadFile(c.w)
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.g.CheckJournal(bytes.NewReader(closed))
		if err != nil {
			t.Fatalf("%s: journal after a clean close: %v", name, err)
		}
		t.Logf("%s: after a clean close, journal sequences %v", name, st.Seqs)
		uniform := !slices.ContainsFunc(st.Seqs, func(s int) bool { return s != st.Seqs[0] })
		if !st.Clean() || uniform {
			t.Errorf("%s: journal after a clean close %+v; want no entry in use, sequences not uniform", name, st)
		}

		crash, err := os.ReadFile(c.x)
		if err != nil {
			t.Fatal(err)
		}
		cf := &memFile{b: crash}
		spb := uint64(c.from.b / 512)
		var sectors []uint64
		st, err = c.g.Replay(cf, func(o Override) error {
			sectors = append(sectors, o.Sector)
			if !bytes.Equal(o.Data, closed[c.g.DataOffset(o.Sector):][:c.from.b]) ||
				!bytes.Equal(o.Tag, closed[c.g.TagOffset(o.Sector):][:32]) {
				t.Errorf("%s: journal block of sector %d differs from the one the kernel wrote in place", name, o.Sector)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: crash copy: %v", name, err)
		}
		var want []uint64
		for s := uint64(seekBlocks * 8); s < seekBlocks*8+128; s += spb {
			want = append(want, s)
		}
		t.Logf("%s: crash copy: %d entries in use, replay of %d sections from %d, sequences %v", name, st.InUse, st.ReplaySections, st.ReplayFrom, st.Seqs)
		// The kernel journals blocks in the order its bios arrive.
		slices.Sort(sectors)
		if !slices.Equal(sectors, want) || st.InUse != len(want) || st.Pending != len(want) {
			t.Errorf("%s: crash copy journal %+v replays sectors %v; want %v", name, st, sectors, want)
		}
		if _, err := c.g.ApplyJournal(cf); err != nil {
			t.Fatal(err)
		}
		// Outside the journal, the replayed copy is the cleanly closed file.
		jo, je := c.g.JournalOffset(), c.g.JournalOffset()+c.g.JournalBytes()
		if !bytes.Equal(cf.b[:jo], closed[:jo]) || !bytes.Equal(cf.b[je:], closed[je:]) {
			t.Errorf("%s: replayed crash copy differs from the closed file (first at byte %d)", name, firstDiff(cf.b, closed))
		}
		if st, err := c.g.CheckJournal(cf); err != nil || !st.Clean() {
			t.Errorf("%s: journal after ApplyJournal: %+v %v", name, st, err)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
