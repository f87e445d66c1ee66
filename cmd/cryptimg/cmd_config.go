package main

import (
	"github.com/cryptimg/cryptimg/header"
	"github.com/spf13/cobra"
)

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
