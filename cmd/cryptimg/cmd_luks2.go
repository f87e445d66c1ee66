package main

// The LUKS2-only commands: config, token and repair, as cryptsetup names
// them.

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

// openLUKS2RW opens path read-write and locked, and requires LUKS2.
func openLUKS2RW(g *globalOptions, path string) (*os.File, *image.Encrypted, *header.LUKS2, error) {
	return openLUKS2(g, path, openEncrypted, openLocked)
}

// openLUKS2 opens path (or the --header file) with open, reads it with
// read (openEncrypted, which warns about a header read from its secondary
// copy, or readEncrypted, which does not: for repair), and requires LUKS2.
func openLUKS2(g *globalOptions, path string, read func(*globalOptions, string, func(string) (*os.File, error)) (*os.File, *image.Encrypted, error), open func(string) (*os.File, error)) (*os.File, *image.Encrypted, *header.LUKS2, error) {
	f, e, err := read(g, path, open)
	if err != nil {
		return nil, nil, nil, err
	}
	h, ok := e.Header.(*header.LUKS2)
	if !ok {
		f.Close()
		return nil, nil, nil, usagef("%s is LUKS%d; this command needs LUKS2", path, e.Header.Info().Version)
	}
	return f, e, h, nil
}

var priorities = map[string]int{"ignore": header.PriorityIgnore, "normal": header.PriorityNormal, "prefer": header.PriorityPrefer}

func newConfigCommand(g *globalOptions) *cobra.Command {
	var label, subsystem, priority string
	var slot int
	cmd := &cobra.Command{
		Use:   "config [--label L] [--subsystem S] [--priority P --key-slot N] IMAGE",
		Short: "Set a LUKS2 header's label, subsystem or a key slot's priority",
		Long: `Set the label and subsystem of a LUKS2 header, or the priority of one key
slot, as "cryptsetup config" does. A priority is ignore (the slot is tried
only when named with --key-slot), normal, or prefer (tried before the
others). Both header copies are rewritten, each synced.
` + exitStatusHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			fl := cmd.Flags()
			if !fl.Changed("label") && !fl.Changed("subsystem") && !fl.Changed("priority") {
				return usagef("config needs --label, --subsystem or --priority")
			}
			p, ok := priorities[priority]
			if fl.Changed("priority") && (!ok || slot < 0) {
				return usagef("--priority takes ignore, normal or prefer, with --key-slot")
			}
			f, e, h, err := openLUKS2RW(g, path)
			if err != nil {
				return err
			}
			defer f.Close()
			if fl.Changed("label") || fl.Changed("subsystem") {
				var l, s *string
				if fl.Changed("label") {
					l = &label
				}
				if fl.Changed("subsystem") {
					s = &subsystem
				}
				if err := e.Apply(h.WithLabel(l, s)); err != nil {
					return err
				}
				h = e.Header.(*header.LUKS2)
			}
			if fl.Changed("priority") {
				if err := e.Apply(h.WithPriority(slot, p)); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&label, "label", "", "new label")
	cmd.Flags().StringVar(&subsystem, "subsystem", "", "new subsystem")
	cmd.Flags().StringVar(&priority, "priority", "", "key slot priority: ignore, normal or prefer")
	cmd.Flags().IntVarP(&slot, "key-slot", "S", -1, "the key slot of --priority")
	return cmd
}

func newTokenCommand(g *globalOptions) *cobra.Command {
	var id, slot int
	var jsonFile, desc string
	cmd := &cobra.Command{
		Use:   "token add|remove|import|export [flags] IMAGE",
		Short: "Manage the tokens of a LUKS2 header",
		Long: `Manage LUKS2 tokens as "cryptsetup token" does:

  token import --json-file F [--token-id N] [--key-slot S] IMAGE
      store the JSON object in F (- for stdin) as a token; it needs a string
      "type" (not starting with the reserved "luks2-") and a "keyslots" array
  token export --token-id N [--json-file F] IMAGE
      print token N's JSON (or write it to a new file F)
  token remove --token-id N IMAGE
  token add --key-description D [--token-id N] [--key-slot S] IMAGE
      add a luks2-keyring token

Without --token-id, import and add take the lowest free number and print it.
` + exitStatusHelp,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			action, path := args[0], args[1]
			switch action {
			case "export":
				if id < 0 {
					return usagef("token export needs --token-id")
				}
				f, e, err := openImage(g, path)
				if err != nil {
					return err
				}
				defer f.Close()
				h, ok := e.Header.(*header.LUKS2)
				if !ok {
					return usagef("%s is LUKS1, which has no tokens", path)
				}
				js, ok := h.TokenJSON(id)
				if !ok {
					return fmt.Errorf("token %d does not exist", id)
				}
				js = append(js, '\n')
				if jsonFile == "" || jsonFile == "-" {
					_, err = g.stdout.Write(js)
					return err
				}
				return writeNewFile(jsonFile, js)
			case "import", "add", "remove":
			default:
				return usagef("unknown token action %q: use add, remove, import or export", action)
			}
			var js []byte
			switch {
			case action == "import" && jsonFile == "":
				return usagef("token import needs --json-file")
			case action == "import":
				var err error
				if js, err = readAllFrom(g, jsonFile); err != nil {
					return err
				}
			case action == "add" && desc == "":
				return usagef("token add needs --key-description")
			case action == "remove" && id < 0:
				return usagef("token remove needs --token-id")
			}
			f, e, h, err := openLUKS2RW(g, path)
			if err != nil {
				return err
			}
			defer f.Close()
			var n int
			var u *header.Update
			switch action {
			case "import":
				u, n, err = h.ImportToken(id, js, slot)
			case "add":
				u, n, err = h.AddKeyringToken(id, desc, slot)
			case "remove":
				return e.Apply(h.RemoveToken(id))
			}
			if err := e.Apply(u, err); err != nil {
				return err
			}
			if id < 0 {
				fmt.Fprintf(g.stdout, "Token %d created.\n", n)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&id, "token-id", -1, "token number (0-31)")
	cmd.Flags().IntVarP(&slot, "key-slot", "S", -1, "assign the token to this key slot")
	cmd.Flags().StringVar(&jsonFile, "json-file", "", "token JSON file (import: - for stdin; export: a new file)")
	cmd.Flags().StringVar(&desc, "key-description", "", "kernel keyring key description (add)")
	return cmd
}

func readAllFrom(g *globalOptions, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(g.stdin)
	}
	return os.ReadFile(path)
}

// writeNewFile creates path (refusing an existing one) with b.
func writeNewFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newRepairCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "repair IMAGE",
		Short: "Rewrite a damaged or stale LUKS2 header copy from the good one",
		Long: `A LUKS2 header has two copies. When one fails its checksum or is older than the
other, or the primary is lost (its first 4 KiB overwritten), every cryptimg
command warns and reads the good one (the secondary is found at any metadata
size from 16 KiB to 4 MiB, as cryptsetup finds it), and none writes but to
commit a change of the header, which writes both copies. "repair" writes the
good copy over both (with the next seqid), each synced, as cryptsetup repair
does; with both copies good it does nothing.

For an image with integrity protection, repair first puts the writes left in
its dm-integrity journal (after a crash of the kernel that had it open) in
place, as the kernel does when it next opens the image, and empties the
journal.
` + exitStatusHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			// The header (or the image) and the data, whose integrity
			// journal is replayed, stay locked for the whole repair.
			hpath, err := headerPath(g, path)
			if err != nil {
				return err
			}
			hf, err := openLocked(hpath)
			if err != nil {
				return err
			}
			defer hf.Close()
			data := hf
			if g.header != "" {
				if data, err = openForWrite(path); err != nil {
					return err
				}
				defer data.Close()
			}
			if err := replayIntegrityJournal(g, data, hf, path); err != nil {
				return err
			}
			_, e, h, err := openLUKS2(g, path, readEncrypted, func(string) (*os.File, error) { return hf, nil })
			if err != nil {
				return err
			}
			if h.Warning == "" {
				info(g, "%s: both LUKS2 header copies are good; nothing to repair", path)
				return nil
			}
			if err := e.Apply(h.Repair()); err != nil {
				return err
			}
			info(g, "%s: repaired (%s)", path, h.Warning)
			return nil
		},
	}
}

// replayIntegrityJournal puts the pending writes of an authenticated
// image's dm-integrity journal (in f, named path, with its header in hdr)
// in place; other images are left alone.
func replayIntegrityJournal(g *globalOptions, f, hdr *os.File, path string) error {
	n, err := image.ReplayJournal(f, hdr)
	switch {
	case errors.Is(err, header.ErrNotAuthenticated):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	case n > 0:
		info(g, "%s: put %d blocks from the integrity journal in place", path, n)
	}
	return nil
}
