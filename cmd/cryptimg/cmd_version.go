package main

import (
	"encoding/json"
	"fmt"
	"runtime"
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

// versionJSON is the output of version --json.
type versionJSON struct {
	MessageType string `json:"message_type"`
	Version     string `json:"version"`
	// Module is the main module's version in the build information, when
	// the binary has one (it differs from Version when -X main.Version
	// is set).
	Module string `json:"module,omitempty"`
	Go     string `json:"go"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	AES    string `json:"aes"` // the ESSIV-CBC kernel
	XTS    string `json:"xts"` // the XTS kernel
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version and the AES kernels in use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				v := versionJSON{MessageType: "version", Version: version(), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
					AES: essiv.Kernel(), XTS: cipher.XTSKernel()}
				if bi, ok := debug.ReadBuildInfo(); ok {
					v.Module = bi.Main.Version
				}
				return json.NewEncoder(g.stdout).Encode(v)
			}
			fmt.Fprintf(g.stdout, "cryptimg %s (aes kernel: %s, xts kernel: %s)\n", version(), essiv.Kernel(), cipher.XTSKernel())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	return cmd
}
