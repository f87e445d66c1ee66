//go:build !linux

package main

import (
	"context"
	"errors"
)

// errOpenLinuxOnly: open and close mount through Linux FUSE and read the
// Linux mount table.
var errOpenLinuxOnly = errors.New("open and close need Linux (FUSE); use decrypt, ls or cat on this system")

func runOpen(ctx context.Context, g *globalOptions, o openOptions, img, mnt string) error {
	return errOpenLinuxOnly
}

func runClose(g *globalOptions, mnt string) error { return errOpenLinuxOnly }

// mountOf: no cryptimg mounts here.
func mountOf(int) string { return "" }
