package main

import (
	"fmt"
	"runtime/debug"

	"github.com/cryptimg/cryptimg/essiv"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/spf13/cobra"
)

// Version can be set at link time: -ldflags "-X main.Version=v1.2.3".
var Version string

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the AES kernels in use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(g.stdout, "cryptimg %s (aes kernel: %s, xts kernel: %s)\n", version(), essiv.Kernel(), cipher.XTSKernel())
			return nil
		},
	}
}
