package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

// corruptJSON is how reports list sectors that failed their integrity
// check: 512-byte sectors of the plaintext, the numbers the kernel logs as
// "INTEGRITY AEAD ERROR, sector N".
type corruptJSON struct {
	Count   uint64   `json:"count"`
	Sectors []uint64 `json:"sectors"` // the first image.MaxReported, ascending
}

func corruptOf(e *image.CorruptError) *corruptJSON {
	return &corruptJSON{Count: e.Count, Sectors: e.Sectors}
}

// list is the sectors for a message, the first ten of them.
func (c *corruptJSON) list() string {
	if c.Count == 1 {
		return "sector " + strconv.FormatUint(c.Sectors[0], 10)
	}
	var s []string
	for i, n := range c.Sectors {
		if i == 10 {
			s = append(s, fmt.Sprintf("… (%d in all)", c.Count))
			break
		}
		s = append(s, strconv.FormatUint(n, 10))
	}
	return "sectors " + strings.Join(s, ", ")
}

type verifyOptions struct {
	key     keyOptions
	keySlot int
	json    bool
}

// verifyReport is verify's --json output.
type verifyReport struct {
	MessageType string       `json:"message_type"`
	Image       string       `json:"image"`
	OK          bool         `json:"ok"`
	Sectors     uint64       `json:"sectors"`
	Bytes       int64        `json:"bytes"`
	Seconds     float64      `json:"seconds"`
	Corrupt     *corruptJSON `json:"corrupt,omitempty"`
	// Error and ExitCode are set when sectors fail: the report is then
	// the one JSON object a failed command prints.
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	volumeJSON
}

func newVerifyCommand(g *globalOptions) *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify [flags] IMAGE",
		Short: "Check every integrity tag of a LUKS2 image with integrity protection",
		Long: `Check every sector of a LUKS2 image made with --integrity (by cryptimg, or
by cryptsetup and written through the kernel) against its tag, as the
kernel's dm-crypt does on every read, without writing plaintext anywhere.

A sector whose data or tag was changed, or that was never written, fails.
The report names the failing ` + strconv.Itoa(image.SectorSize) + `-byte sectors, the numbers the kernel logs
as "INTEGRITY AEAD ERROR, sector N". Exit status 4 when any sector fails.
` + exitStatusHelp,
		Example: `  cryptimg verify --key-file key.bin disk.luks
  cryptimg verify --key-file key.bin --json disk.luks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runVerify(cmd, g, o, args[0]) },
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot (0-"+strconv.Itoa(header.SlotCount(2)-1)+")")
	f.BoolVar(&o.json, "json", false, "print the report as JSON on stdout")
	return cmd
}

func runVerify(cmd *cobra.Command, g *globalOptions, o verifyOptions, name string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	src, err := openSource(name)
	if err != nil {
		return err
	}
	defer src.Close()
	e, closeHeader, err := openData(g, src, name)
	if err != nil {
		return err
	}
	defer closeHeader()
	if !e.Authenticated() {
		return usagef("%s has no integrity protection: there are no tags to verify", name)
	}
	k, err := unlockImage(g, e, o.key, name, passPrompt(name), o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	prog := g.newProgress("verify")
	start := time.Now()
	r, err := e.Verify(cmd.Context(), k, g.pipeline(prog))
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	rep := verifyReport{MessageType: "verify", Image: name, OK: r.Corrupt == nil, Sectors: r.Sectors, Bytes: r.Bytes,
		Seconds: time.Since(start).Seconds(), volumeJSON: volumeOf(e.Header, k.Slot)}
	var failed error
	if r.Corrupt != nil {
		rep.Corrupt = corruptOf(r.Corrupt)
		failed = &verifyFailed{image: name, corrupt: r.Corrupt}
		rep.Error, rep.ExitCode = oneLine(failed.Error()), exitCode(failed)
	}
	switch {
	case o.json:
		if err := json.NewEncoder(g.stdout).Encode(rep); err != nil {
			return err
		}
		g.jsonReported = true
	case r.Corrupt == nil && !g.quiet:
		fmt.Fprintf(g.stderr, "cryptimg: verified %s: %d sectors (%s), every tag matches (%.2fs)\n",
			name, r.Sectors, humanBytes(r.Bytes), rep.Seconds)
	}
	return failed
}

// verifyFailed is verify's finding of bad sectors: it lists them, where
// decrypt's error names only the first.
type verifyFailed struct {
	image   string
	corrupt *image.CorruptError
}

func (v *verifyFailed) Error() string {
	return fmt.Sprintf("%s: %s the integrity check: %s", v.image, failing(v.corrupt), corruptOf(v.corrupt).list())
}

func (v *verifyFailed) Unwrap() error { return v.corrupt }

// failing says how many sectors failed: "1 sector fails", "3 sectors fail".
func failing(c *image.CorruptError) string {
	if c.Count == 1 {
		return "1 sector fails"
	}
	return fmt.Sprintf("%d sectors fail", c.Count)
}
