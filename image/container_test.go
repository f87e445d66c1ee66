package image

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// kindChecks are the ways code asks which container an encrypted image
// is, or finds a qcow2 image's LUKS area itself: only the container files
// (container.go, container_*.go) may.
var kindChecks = []*regexp.Regexp{
	regexp.MustCompile(`\be\.Format\s*[!=]=|[!=]=\s*e\.Format\b|switch\s+e\.Format\b`), // an Encrypted's kind
	regexp.MustCompile(`\be\.Qcow2\s*[!=]=\s*nil`),
	regexp.MustCompile(`\.Crypt(Offset|Length)\b`),                 // the qcow2 LUKS area
	regexp.MustCompile(`\bqcow2\.IsQcow2\(`),                       // see plainInputs
	regexp.MustCompile(`Info\(\)\.Integrity\s*[!=]=\s*""\s*{\s*$`), // a header's integrity choosing a path
}

// kindCheckAllowed are the uses outside the container files that are not
// about an encrypted image's container: plaintext inputs detected by
// magic, and integrity checks that refuse or pick a cipher rather than a
// container.
var kindCheckAllowed = map[string][]string{
	"plain.go":     {"qcow2.IsQcow2("},
	"partition.go": {"qcow2.IsQcow2("},
	// A plain GPT disk to add verity partitions to: qcow2 is refused.
	"verity_partition.go": {"qcow2.IsQcow2("},
	"stream.go":           {"qcow2.IsQcow2(", `Info().Integrity != ""`},
	"image.go":            {`Info().Integrity != ""`}, // newKey: an authenticated key's cipher
	"auth.go":             {`Info().Integrity != ""`, `Info().Integrity == ""`},
	"resize.go":           {`Info().Integrity != ""`}, // refused before the size checks
}

// kindSwitches lists, as "file:line: text", the kind checks in the
// non-test Go files of dir outside the container files.
func kindSwitches(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range files {
		name := filepath.Base(p)
		if strings.HasSuffix(name, "_test.go") || name == "container.go" || strings.HasPrefix(name, "container_") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
	lines:
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, re := range kindChecks {
				if !re.MatchString(line) {
					continue
				}
				for _, ok := range kindCheckAllowed[name] {
					if strings.Contains(line, ok) {
						continue lines
					}
				}
				found = append(found, name+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
				continue lines
			}
		}
	}
	return found
}

// TestNoContainerKindSwitch: image decides by container kind only in the
// container implementations; everything else asks the container.
func TestNoContainerKindSwitch(t *testing.T) {
	for _, f := range kindSwitches(t, ".") {
		t.Errorf("a container kind check outside the container files: %s", f)
	}
}
