package main

import (
	"fmt"
	"strconv"

	"github.com/cryptimg/cryptimg/header"
	"github.com/spf13/cobra"
)

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
	cmd.Flags().IntVar(&id, "token-id", -1, "token number (0-"+strconv.Itoa(header.SlotCount(2)-1)+")")
	cmd.Flags().IntVarP(&slot, "key-slot", "S", -1, "assign the token to this key slot")
	cmd.Flags().StringVar(&jsonFile, "json-file", "", "token JSON file (import: - for stdin; export: a new file)")
	cmd.Flags().StringVar(&desc, "key-description", "", "kernel keyring key description (add)")
	return cmd
}
