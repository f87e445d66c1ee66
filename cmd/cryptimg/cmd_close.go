package main

import "github.com/spf13/cobra"

func newCloseCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "close MOUNTPOINT",
		Short: "Flush and unmount an image mounted by cryptimg open",
		Long: `Flush the image mounted at MOUNTPOINT to stable storage and unmount it; the
open process then exits. A stale mount (its open process was killed) is
cleared.
` + exitStatusHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClose(g, args[0])
		},
	}
}
