package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func newEraseCommand(g *globalOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "erase [flags] IMAGE",
		Short: "Destroy every key slot, making the data unrecoverable without a header backup",
		Long: `Destroy every key slot of a LUKS1, LUKS2 or qcow2+LUKS image, as "cryptsetup
luksErase" does. No key is needed. Each active slot is disabled in the
header (LUKS2: removed from both metadata copies, and from the tokens that
name it), then its key material is overwritten with random bytes; a LUKS1
image's disabled slots are overwritten too. The data stays where it is,
but without a header backup (header-backup) or the volume key nothing can
decrypt it any more.

A crash at any moment leaves each slot either working or disabled, never
half written. With --header only the header file changes.

It asks for YES on a terminal unless --batch-mode is given, and is refused
on a non-terminal without --batch-mode. --json prints what was destroyed on
stdout: {"message_type":"erase","image":…,"header":…?,"type":"luks1"|"luks2",
"format":"raw"|"qcow2","key_slots":[…],"wiped_slots":[…]}, key_slots the
slots that were active, wiped_slots every slot whose key material was
overwritten.
` + exitStatusHelp,
		Example: `  cryptimg erase disk.luks
  cryptimg erase -q --json vm.qcow2
  cryptimg erase -q --header disk.hdr disk.img`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runErase(g, args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was erased as JSON on stdout")
	return cmd
}

func runErase(g *globalOptions, path string, asJSON bool) error {
	if err := mustConfirm(g, "erase"); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	active := e.Header.ActiveSlots()
	warning := fmt.Sprintf("This destroys all key slots of %s (%d active).\nWithout a header backup its data becomes permanently unrecoverable.", f.Name(), active)
	if err := confirm(g, warning); err != nil {
		return err
	}
	r, err := e.EraseSlots(nil)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	if asJSON {
		return json.NewEncoder(g.stdout).Encode(eraseJSON{
			MessageType: "erase", Image: path, Header: g.header,
			Type: "luks" + strconv.Itoa(e.Header.Info().Version), Format: string(e.Format),
			KeySlots: nonNil(r.Removed), WipedSlots: nonNil(r.Wiped),
		})
	}
	info(g, "%s: all key slots erased (%d were active)", f.Name(), active)
	return nil
}

// nonNil makes an empty list [] in JSON, not null.
func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// eraseJSON is erase's --json output: the image (and detached header), its
// LUKS type and container, the slots that were active and are removed, and
// every slot whose key material was overwritten (LUKS1: all eight).
type eraseJSON struct {
	MessageType string `json:"message_type"` // "erase"
	Image       string `json:"image"`
	Header      string `json:"header,omitempty"`
	Type        string `json:"type"`   // luks1 or luks2, as --type
	Format      string `json:"format"` // raw or qcow2
	KeySlots    []int  `json:"key_slots"`
	WipedSlots  []int  `json:"wiped_slots"`
}
