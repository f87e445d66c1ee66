package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

type uuidOptions struct {
	uuid string
	json bool
}

// uuidJSON is the output of uuid --json: the UUID read, or the one set.
type uuidJSON struct {
	MessageType string `json:"message_type"`
	Image       string `json:"image"`
	UUID        string `json:"uuid"`
}

func newUUIDCommand(g *globalOptions) *cobra.Command {
	var o uuidOptions
	cmd := &cobra.Command{
		Use:   "uuid [--uuid NEW] IMAGE",
		Short: "Print or set the LUKS UUID",
		Long: `Print the UUID of the image's LUKS header on stdout, or with --uuid set it,
as "cryptsetup luksUUID" does. NEW must be in xxxxxxxx-xxxx-xxxx-xxxx-
xxxxxxxxxxxx form; it is stored lower-case. Setting asks for confirmation
on a terminal unless --batch-mode is given (as cryptsetup does; it touches
no key).
` + exitStatusHelp,
		Example: `  cryptimg uuid disk.luks
  cryptimg uuid -q --uuid 01234567-89ab-4cde-8f01-23456789abcd disk.luks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUUID(g, o, args[0])
		},
	}
	cmd.Flags().StringVar(&o.uuid, "uuid", "", "set this UUID")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the UUID (with --uuid, the one set) as JSON on stdout")
	return cmd
}

func runUUID(g *globalOptions, o uuidOptions, path string) error {
	if o.uuid == "" {
		f, e, err := openImage(g, path)
		if err != nil {
			return err
		}
		defer f.Close()
		if o.json {
			return json.NewEncoder(g.stdout).Encode(uuidJSON{"uuid", path, e.Header.Info().UUID})
		}
		fmt.Fprintln(g.stdout, e.Header.Info().UUID)
		return nil
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !g.batch && g.stdinIsTerminal() {
		if err := confirm(g, fmt.Sprintf("This changes the UUID of %s from %s to %s.", path, e.Header.Info().UUID, o.uuid)); err != nil {
			return err
		}
	}
	if err := e.SetUUID(o.uuid); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(uuidJSON{"uuid", path, e.Header.Info().UUID})
	}
	return nil
}
