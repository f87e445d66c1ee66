package main

import (
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// completionShells are the shells cobra writes completion scripts for, each
// with its generator; includeDesc adds the commands' and flags' short help
// to the candidates.
var completionShells = map[string]func(root *cobra.Command, w io.Writer, includeDesc bool) error{
	"bash": func(root *cobra.Command, w io.Writer, d bool) error { return root.GenBashCompletionV2(w, d) },
	"zsh": func(root *cobra.Command, w io.Writer, d bool) error {
		if d {
			return root.GenZshCompletion(w)
		}
		return root.GenZshCompletionNoDesc(w)
	},
	"fish": func(root *cobra.Command, w io.Writer, d bool) error { return root.GenFishCompletion(w, d) },
	"powershell": func(root *cobra.Command, w io.Writer, d bool) error {
		if d {
			return root.GenPowerShellCompletionWithDesc(w)
		}
		return root.GenPowerShellCompletion(w)
	},
}

var completionShellNames = []string{"bash", "zsh", "fish", "powershell"}

// newCompletionCommand replaces cobra's default completion command (which
// newRootCommand disables): one command taking the shell as its argument,
// so that an unknown or missing shell is a usage error instead of a help
// text and exit 0.
func newCompletionCommand(g *globalOptions) *cobra.Command {
	var noDesc bool
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script for bash, zsh, fish or powershell",
		Long: `Print on stdout a script that makes the shell complete cryptimg's commands and
flags. The script asks cryptimg itself for the candidates (through the hidden
command __complete), so it stays right as cryptimg changes; cryptimg must be
on PATH.

  bash        needs the bash-completion package:
                source <(cryptimg completion bash)         # this shell only
                cryptimg completion bash > /etc/bash_completion.d/cryptimg
  zsh         with compinit enabled:
                cryptimg completion zsh > "${fpath[1]}/_cryptimg"
  fish        cryptimg completion fish > ~/.config/fish/completions/cryptimg.fish
  powershell  cryptimg completion powershell | Out-String | Invoke-Expression

Start a new shell afterwards.
` + exitStatusHelp,
		Example:   `  cryptimg completion bash > ~/.local/share/bash-completion/completions/cryptimg`,
		ValidArgs: completionShellNames,
		Args: func(cmd *cobra.Command, args []string) error {
			want := strings.Join(completionShellNames, ", ")
			if len(args) != 1 {
				return usagef("completion takes one shell: %s", want)
			}
			if completionShells[args[0]] == nil {
				return usagef("unknown shell %q: use %s", args[0], want)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return completionShells[args[0]](cmd.Root(), g.stdout, !noDesc)
		},
	}
	cmd.Flags().BoolVar(&noDesc, "no-descriptions", false, "complete without the commands' and flags' descriptions")
	return cmd
}

// flagValues lists, for each flag name, the values the shell completes, each
// from the one place that checks them: the cipher registry, the lists the
// flag checks use. A command whose flag of that name takes other values
// registers its own completion first (benchmark --cipher).
var flagValues = map[string]func() []string{
	"cipher": func() []string {
		specs := cipher.Supported()
		for _, m := range cipher.AuthModes() {
			if !slices.Contains(specs, m.Spec) {
				specs = append(specs, m.Spec)
			}
		}
		slices.Sort(specs)
		return specs
	},
	"type":          luksTypes,
	"output-format": func() []string { return outputFormats },
	"hash":          header.Hashes,
	"pbkdf":         pbkdfNames,
	"integrity":     cipher.IntegrityOptions,
	"priority":      func() []string { return slices.Sorted(maps.Keys(priorities)) },
	"progress": func() []string {
		names := make([]string, len(progressModes))
		for i, m := range progressModes {
			names[i] = string(m)
		}
		return names
	},
}

// registerFlagCompletions gives every flag of cmd and its subcommands that
// flagValues names its values, unless the command registered its own.
func registerFlagCompletions(cmd *cobra.Command) {
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		values, ok := flagValues[f.Name]
		if _, done := cmd.GetFlagCompletionFunc(f.Name); !ok || done {
			return
		}
		cmd.RegisterFlagCompletionFunc(f.Name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return values(), cobra.ShellCompDirectiveNoFileComp
		})
	})
	for _, c := range cmd.Commands() {
		registerFlagCompletions(c)
	}
}
