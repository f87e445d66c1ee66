package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCommand is the hidden "man" command: it writes a section 1 man page
// for cryptimg and for each of its commands, as scripts/install-man.sh
// installs them.
func newManCommand(g *globalOptions) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "man --dir DIR",
		Short: "Write the man pages cryptimg.1 and cryptimg-COMMAND.1 into DIR",
		Long: `Write a man page for cryptimg (cryptimg.1) and one for each command
(cryptimg-COMMAND.1) into DIR, created if missing; existing pages are
overwritten. The pages are dated with SOURCE_DATE_EPOCH if it is set, for
reproducible output, else with the current month.
` + exitStatusHelp,
		Example: `  cryptimg man --dir /usr/local/share/man/man1`,
		Hidden:  true,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usagef("man needs --dir DIR")
			}
			date, err := manDate()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			// Only the command being run has had its --version flag
			// added; the root's page should list it.
			root.InitDefaultVersionFlag()
			hdr := &doc.GenManHeader{Section: "1", Source: "cryptimg", Manual: "cryptimg manual", Date: &date}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return err
			}
			info(g, "wrote %d man pages to %s", manPages(root), dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write the pages into")
	return cmd
}

// manPages counts the pages GenManTree writes for c: one for c and one
// for each available command below it.
func manPages(c *cobra.Command) int {
	n := 1
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			n += manPages(sub)
		}
	}
	return n
}

// manDate is the date of the man pages: SOURCE_DATE_EPOCH (seconds since
// 1970, UTC) when set, so that a build is reproducible, else now.
func manDate() (time.Time, error) {
	s, ok := os.LookupEnv("SOURCE_DATE_EPOCH")
	if !ok || s == "" {
		return time.Now().UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
