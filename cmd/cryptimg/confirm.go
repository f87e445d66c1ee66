package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
)

// errAborted reports a confirmation answered with anything but YES.
var errAborted = errors.New("operation aborted")

// mustConfirm fails unless a destructive operation can be confirmed: with
// --batch-mode it can, on a terminal it will be asked, anywhere else it is
// refused before any secret is read.
func mustConfirm(g *globalOptions, what string) error {
	if g.batch || g.stdinIsTerminal() {
		return nil
	}
	return usagef("%s needs confirmation, and stdin is not a terminal: pass --batch-mode (-q) to proceed without asking", what)
}

// confirm asks on the terminal for a capital YES, as cryptsetup does,
// unless --batch-mode is set. Call mustConfirm first.
func confirm(g *globalOptions, warning string) error {
	if g.batch {
		return nil
	}
	if !g.stdinIsTerminal() {
		return usagef("confirmation needs a terminal: pass --batch-mode (-q) to proceed without asking")
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("failed to open the terminal: %w", err)
	}
	defer tty.Close()
	fmt.Fprintf(tty, "\nWARNING!\n========\n%s\n\nAre you sure? (Type 'yes' in capital letters): ", warning)
	line, err := bufio.NewReader(tty).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "YES" {
		return errAborted
	}
	return nil
}
