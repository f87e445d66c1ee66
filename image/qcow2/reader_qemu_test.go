package qcow2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// qemuWrites is a qemu-io script touching full and partial clusters,
// subclusters, zero writes over data and over holes, a discard and the
// unaligned tail of a 16 MiB + 1536 byte image.
var qemuWrites = []string{
	"write -P 0xab 0 64k",
	"write -P 0xcd 100k 3k",
	"write -P 0x11 1M 256k",
	"write -z 1088k 64k",
	"write -z 4M 128k",
	"discard 1216k 64k",
	"write -P 0x33 7M 2k",
	"write -P 0x44 9218k 2k",
	"write -z 9220k 2k",
	"write -P 0x22 16M 1536",
}

const qemuImageSize = "16778752" // 16 MiB + 1536

// TestReaderVsQemu creates images with qemu-img/qemu-io and compares the
// guest view read through Extents, ReadAt and ReadCompressed with
// qemu-img convert -O raw, byte for byte.
func TestReaderVsQemu(t *testing.T) {
	needQemu(t)
	cases := []struct {
		name string
		opts string // qemu-img -o
	}{
		{"v3-512", "cluster_size=512"},
		{"v3-4k", "cluster_size=4k"},
		{"v3-64k", "cluster_size=64k"},
		{"v3-2m", "cluster_size=2M"},
		{"v2-64k", "compat=0.10"},
		{"v2-4k", "compat=0.10,cluster_size=4k"},
		{"extl2-16k", "extended_l2=on,cluster_size=16k"},
		{"extl2-64k", "extended_l2=on"},
		{"extl2-2m", "extended_l2=on,cluster_size=2M"},
		{"refcount1-64k", "refcount_bits=1"},
		{"lazy-64k", "lazy_refcounts=on"},
		{"prealloc-metadata", "preallocation=metadata,cluster_size=16k"},
		{"prealloc-metadata-extl2", "preallocation=metadata,extended_l2=on"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "img.qcow2")
			runCmd(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", c.opts, path, qemuImageSize)
			args := []string{}
			for _, w := range qemuWrites {
				args = append(args, "-c", w)
			}
			runCmd(t, "qemu-io", append(args, path)...)
			want := qemuRaw(t, path)
			im, exts, got := guestView(t, path)
			if !bytes.Equal(got, want) {
				t.Fatalf("guest view differs from qemu-img convert: %s", firstDiff(got, want))
			}
			kinds := map[Kind]int{}
			for _, e := range exts {
				kinds[e.Kind]++
			}
			if kinds[Data] == 0 || kinds[Unallocated] == 0 && !strings.Contains(c.opts, "preallocation") {
				t.Errorf("extent kinds %v: want data and unallocated runs", kinds)
			}
			if im.Version == 3 && kinds[Zero] == 0 {
				t.Errorf("extent kinds %v: want zero runs in a v3 image", kinds)
			}
			t.Logf("%d extents %v, cluster %d, version %d, extended L2 %v", len(exts), kinds, im.ClusterSize, im.Version, im.ExtendedL2)
		})
	}
}

// compressibleRaw returns deterministic raw content mixing zeros, random
// (incompressible) clusters, text and short runs.
func compressibleRaw(size int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, size)
	for off := 0; off < size; off += 16 << 10 {
		chunk := b[off:min(off+16<<10, size)]
		switch rng.IntN(4) {
		case 0: // zeros
		case 1:
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
		case 2:
			copy(chunk, bytes.Repeat([]byte("qcow2 compressed cluster test text "), len(chunk)/35+1))
		case 3:
			for i := range chunk {
				chunk[i] = byte(i / 97 % 7)
			}
		}
	}
	return b
}

func qemuSupportsZstd(t *testing.T) bool {
	out, _ := exec.Command("qemu-img", "create", "-f", "qcow2", "-o", "help").CombinedOutput()
	return bytes.Contains(out, []byte("compression_type"))
}

// TestReaderVsQemuCompressed converts raw data with qemu-img convert -c
// (deflate and zstd, several cluster sizes, v2 and extended L2) and compares
// the guest view with the source.
func TestReaderVsQemuCompressed(t *testing.T) {
	needQemu(t)
	src := compressibleRaw(6<<20 + 1536)
	dir := t.TempDir()
	rawPath := filepath.Join(dir, "src.raw")
	if err := os.WriteFile(rawPath, src, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, opts string }{
		{"zlib-512", "cluster_size=512,compression_type=zlib"},
		{"zlib-4k", "cluster_size=4k,compression_type=zlib"},
		{"zlib-64k", "compression_type=zlib"},
		{"zlib-2m", "cluster_size=2M,compression_type=zlib"},
		{"zlib-v2", "compat=0.10"},
		{"zlib-extl2", "extended_l2=on,compression_type=zlib"},
		{"zstd-512", "cluster_size=512,compression_type=zstd"},
		{"zstd-64k", "compression_type=zstd"},
		{"zstd-2m", "cluster_size=2M,compression_type=zstd"},
		{"zstd-extl2-32k", "cluster_size=32k,extended_l2=on,compression_type=zstd"},
	}
	zstdOK := qemuSupportsZstd(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if strings.Contains(c.opts, "zstd") && !zstdOK {
				t.Skip("skipping: this qemu-img has no compression_type option")
			}
			path := filepath.Join(t.TempDir(), "c.qcow2")
			runCmd(t, "qemu-img", "convert", "-c", "-O", "qcow2", "-o", c.opts, rawPath, path)
			im, exts, got := guestView(t, path)
			if !bytes.Equal(got, src) {
				t.Fatalf("guest view differs from the source: %s", firstDiff(got, src))
			}
			if want := qemuRaw(t, path); !bytes.Equal(got, want) {
				t.Fatalf("guest view differs from qemu-img convert: %s", firstDiff(got, want))
			}
			n := 0
			for _, e := range exts {
				if e.Kind == Compressed {
					n++
				}
			}
			if n == 0 {
				t.Fatal("no compressed extents")
			}
			// An Image is safe for concurrent use: decompress every cluster
			// from several goroutines at once (run with -race).
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Go(func() {
					cluster := make([]byte, im.ClusterSize)
					for _, e := range exts {
						if e.Kind != Compressed {
							continue
						}
						if err := im.ReadCompressed(f, e, cluster); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(cluster[:e.Length], src[e.GuestOffset:e.GuestOffset+e.Length]) {
							errs <- fmt.Errorf("cluster at %#x differs", e.GuestOffset)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			wantType := CompressionDeflate
			if strings.Contains(c.opts, "zstd") {
				wantType = CompressionZstd
			}
			if im.CompressionType != wantType {
				t.Fatalf("compression type %d, want %d", im.CompressionType, wantType)
			}
			t.Logf("%d extents, %d compressed", len(exts), n)
		})
	}
}

// TestReaderHugeSparse checks that a 1 TiB image with three small writes is
// mapped quickly and agrees with qemu-img map.
func TestReaderHugeSparse(t *testing.T) {
	needQemu(t)
	path := filepath.Join(t.TempDir(), "big.qcow2")
	runCmd(t, "qemu-img", "create", "-q", "-f", "qcow2", path, "1T")
	runCmd(t, "qemu-io", "-c", "write -P 0xab 0 1M", "-c", "write -P 0xcd 512G 1M", "-c", "write -P 0xef 1048575M 1M", path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	start := time.Now()
	im, err := Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	exts, err := im.Extents(f)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExtents(im, exts); err != nil {
		t.Fatal(err)
	}
	t.Logf("1 TiB image: Open+Extents %v, %d extents", elapsed, len(exts))
	if elapsed > 2*time.Second {
		t.Errorf("Open+Extents took %v on a sparse 1 TiB image", elapsed)
	}
	var data []Extent
	for _, e := range exts {
		if e.Kind == Data {
			data = append(data, e)
		}
	}
	// qemu-img map lists the allocated data ranges with their host offsets.
	out := runCmd(t, "qemu-img", "map", "--output=json", path)
	var m []struct {
		Start, Length int64
		Data          bool
		Offset        *int64
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	var want []Extent
	for _, e := range m {
		if e.Data && e.Offset != nil {
			want = append(want, Extent{Kind: Data, GuestOffset: e.Start, Length: e.Length, HostOffset: *e.Offset})
		}
	}
	if len(data) != len(want) {
		t.Fatalf("data extents %+v, qemu-img map %+v", data, want)
	}
	for i := range want {
		if data[i] != want[i] {
			t.Fatalf("data extent %d: %+v, qemu-img map %+v", i, data[i], want[i])
		}
	}
	for i, p := range []byte{0xab, 0xcd, 0xef} {
		b := make([]byte, data[i].Length)
		if _, err := f.ReadAt(b, data[i].HostOffset); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, bytes.Repeat([]byte{p}, len(b))) {
			t.Fatalf("extent %d does not hold pattern %#x", i, p)
		}
	}
}

// qemuLUKS caches one freshly created qemu qcow2+LUKS image (4 MiB, 64 KiB
// clusters, aes-256-cbc-essiv:sha256, passphrase abc123): creating one is
// slow, and Debian's qemu 7.2 randomly fails its PBKDF benchmark ("Unable to
// get accurate CPU usage"), hence the retries.
var qemuLUKS struct {
	once sync.Once
	b    []byte
	err  error
}

// qemuLUKSImage writes a copy of the cached image into a temporary
// directory and returns its path.
func qemuLUKSImage(t *testing.T) string {
	t.Helper()
	qemuLUKS.once.Do(func() {
		dir, err := os.MkdirTemp("", "qcow2-luks")
		if err != nil {
			qemuLUKS.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "enc.qcow2")
		var out []byte
		for range 10 {
			if out, err = exec.Command("qemu-img", "create", "-q", testSecret, "-f", "qcow2", "-o", testEncrypt, path, "4M").CombinedOutput(); err == nil {
				break
			}
		}
		if err != nil {
			qemuLUKS.err = fmt.Errorf("qemu-img create: %v\n%s", err, out)
			return
		}
		qemuLUKS.b, qemuLUKS.err = os.ReadFile(path)
	})
	if qemuLUKS.err != nil {
		t.Fatal(qemuLUKS.err)
	}
	path := filepath.Join(t.TempDir(), "enc.qcow2")
	if err := os.WriteFile(path, qemuLUKS.b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	testSecret  = "--object=secret,id=sec0,data=abc123"
	testEncrypt = "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.cipher-alg=aes-256,encrypt.cipher-mode=cbc," +
		"encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256,encrypt.hash-alg=sha256,encrypt.iter-time=10"
)

// TestReaderQemuLUKS opens a qemu-made qcow2+LUKS image: the FDE extension
// gives the LUKS area, which no data extent may overlap.
func TestReaderQemuLUKS(t *testing.T) {
	needQemu(t)
	path := qemuLUKSImage(t)
	runCmd(t, "qemu-io", testSecret, "--image-opts", "driver=qcow2,encrypt.key-secret=sec0,file.filename="+path,
		"-c", "write -P 0xab 0 64k", "-c", "write -z 2M 64k", "-c", "write -P 1 3M 4k")
	im, exts, _ := guestView(t, path)
	if im.CryptMethod != CryptLUKS || im.CryptOffset != 0x40000 || im.CryptLength != 1052672 {
		t.Fatalf("crypt method %d offset %#x length %d, want 2, 0x40000, 1052672", im.CryptMethod, im.CryptOffset, im.CryptLength)
	}
	end := im.CryptOffset + ceilDiv(im.CryptLength, im.ClusterSize)*im.ClusterSize
	n := 0
	for _, e := range exts {
		if e.Kind == Data {
			n++
			if e.HostOffset < end && e.HostOffset+e.Length > im.CryptOffset {
				t.Fatalf("data extent %+v overlaps the LUKS area", e)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d data extents, want 2: %+v", n, exts)
	}
}
