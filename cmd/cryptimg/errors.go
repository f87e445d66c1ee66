package main

import (
	"context"
	"errors"
	"strings"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/filelock"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/image/verity"
)

// hint is what the CLI adds to a library error: the flag or command that
// resolves it. Library errors name no flags.
func hint(err error) string {
	var busy *image.BusyError
	var vf *verifyFailed
	var re *resumableError
	switch {
	case errors.As(err, &re):
		return "run the same command again to continue, or: cryptimg " + re.command + " --resume " + re.path
	case errors.As(err, &busy):
		return "finish it with: cryptimg " + opCommand[busy.Op] + " --resume " + busy.Image()
	case errors.Is(err, image.ErrExists):
		return "use --force to overwrite"
	case errors.Is(err, image.ErrNotRegularOutput):
		return "write the image to a file, then copy it to the device, for example with dd"
	case errors.Is(err, image.ErrInPlaceQcow2):
		return "use cryptimg encrypt INPUT OUTPUT or decrypt INPUT OUTPUT for qcow2"
	case errors.Is(err, image.ErrCostly):
		return "pass --allow-slow-kdf to unlock anyway"
	case errors.Is(err, image.ErrJournalPending):
		return "put them in place with: cryptimg repair IMAGE (as the kernel does when it opens the image)"
	case errors.As(err, &vf):
		return "decrypt --allow-corrupt writes the other sectors, these as zeros"
	case errors.Is(err, image.ErrCorrupt):
		return "cryptimg verify lists every failing sector; decrypt --allow-corrupt writes the others"
	case errors.Is(err, header.ErrNullCipher):
		return "pass --allow-null-cipher to use it anyway (anyone who can write the image could have written that part)"
	case errors.Is(err, header.ErrNotAuthenticated):
		return "verify is for images made with --integrity"
	case errors.Is(err, image.ErrNoToken):
		return "without --token-only the key file or the passphrase prompt follows the tokens"
	case errors.Is(err, image.ErrNoTokens):
		return "convert the header first: cryptimg convert --type luks2 IMAGE"
	}
	return ""
}

// keyHint is the hint for an exit code of a run whose passphrase key files
// ended in a newline: when no key slot matched, the newline (kept, as
// cryptsetup keeps it) is the likely reason, as "echo pass | cryptimg ...
// -d -" sends one.
func keyHint(g *globalOptions, code int) string {
	if code != exitNoKey || len(g.newlineKeys) == 0 {
		return ""
	}
	verb := " ends"
	if len(g.newlineKeys) > 1 {
		verb = " each end"
	}
	return strings.Join(g.newlineKeys, " and ") + verb + " in a newline, which is part of the key (as cryptsetup reads it); " +
		"if the passphrase was set without one, write it with printf '%s' instead of echo, or pass --keyfile-size with one byte less"
}

// exitCode maps an error to cryptimg's exit status, in one place.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, header.ErrNoMatchingKeyslot),
		errors.Is(err, image.ErrVolumeKeyMismatch),
		errors.Is(err, image.ErrNoToken):
		return exitNoKey
	case errors.Is(err, image.ErrBusy),
		errors.Is(err, filelock.ErrLocked),
		errors.Is(err, image.ErrJournalPending),
		errors.Is(err, image.ErrJournalMissing),
		errors.Is(err, header.ErrMarked),
		errors.Is(err, header.ErrLUKS2Reencrypt):
		return exitBusy
	case errors.Is(err, image.ErrJournalCorrupt):
		return exitBadImage
	case errors.Is(err, header.ErrNullCipher), errors.Is(err, header.ErrUnusable):
		// A header cryptsetup loads (dump shows it) with a keyslot or
		// segment cryptimg will not use: not corrupt, so not 4; not a
		// wrong passphrase either, which cryptsetup's 2 for a refused
		// null-cipher keyslot (EPERM) would tell a script. A refusal a
		// flag can lift, as --allow-slow-kdf's.
		return exitFailure
	case errors.Is(err, header.ErrNotLUKS),
		errors.Is(err, header.ErrCorrupt),
		errors.Is(err, image.ErrTruncated),
		errors.Is(err, image.ErrNotEncrypted),
		errors.Is(err, image.ErrCorrupt),
		errors.Is(err, integrity.ErrNoSuperblock),
		errors.Is(err, integrity.ErrSuperblock),
		errors.Is(err, integrity.ErrTooSmall),
		errors.Is(err, integrity.ErrMismatch),
		errors.Is(err, integrity.ErrJournal),
		errors.Is(err, integrity.ErrUnsupported),
		errors.Is(err, qcow2.ErrCorrupt),
		errors.Is(err, verity.ErrCorrupt),
		errors.Is(err, verity.ErrNoSuperblock),
		errors.Is(err, verity.ErrTruncated),
		errors.Is(err, verity.ErrSuperblock):
		return exitBadImage
	case errors.As(err, &ue):
		return exitFailure
	default:
		return exitFailure
	}
}
