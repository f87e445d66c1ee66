package image

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// TestRootHashUUIDs: the UUIDs systemd-repart 252 gave the data and hash
// partitions of a root hash it made.
func TestRootHashUUIDs(t *testing.T) {
	root := []byte{0xa7, 0xbc, 0x33, 0x69, 0x86, 0x3a, 0x45, 0xaa, 0x48, 0x08, 0x41, 0x7a, 0xc3, 0xfd, 0xde, 0x78,
		0x25, 0x6f, 0x2b, 0x96, 0xa2, 0xcf, 0x14, 0x89, 0xa6, 0xb6, 0xd3, 0xfc, 0x95, 0x09, 0x4e, 0x4a}
	d, h := RootHashUUIDs(root)
	if d != "a7bc3369-863a-45aa-4808-417ac3fdde78" || h != "256f2b96-a2cf-1489-a6b6-d3fc95094e4a" {
		t.Errorf("got %s, %s", d, h)
	}
}

// TestVerityTypes checks the table against systemd-id128 show: every
// root and usr type systemd knows, with its verity and signature types
// (not the host-dependent aliases "native" and "secondary").
func TestVerityTypes(t *testing.T) {
	id128 := peer.Path(t, "systemd-id128")
	out, err := exec.Command(id128, "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && len(f[1]) == 32 {
			g := f[1]
			known[f[0]] = g[0:8] + "-" + g[8:12] + "-" + g[12:16] + "-" + g[16:20] + "-" + g[20:]
		}
	}
	n := 0
	for name, g := range known {
		if !strings.HasPrefix(name, "root-") && !strings.HasPrefix(name, "usr-") || strings.Contains(name, "-verity") || strings.Contains(name, "-secondary") || strings.Contains(name, "-native") {
			continue
		}
		n++
		got, v, s, ok := VerityTypes(strings.ToUpper(g))
		if !ok || got != name || v != known[name+"-verity"] || s != known[name+"-verity-sig"] {
			t.Errorf("%s (%s): got %q %s %s %v", name, g, got, v, s, ok)
		}
	}
	if n != len(discoverableTypes) || n < 40 {
		t.Errorf("systemd knows %d root/usr types, the table has %d", n, len(discoverableTypes))
	}
	if _, _, _, ok := VerityTypes("0fc63daf-8483-4772-8e79-3d47d8e4477d"); ok {
		t.Error("linux-generic has verity types")
	}
}
