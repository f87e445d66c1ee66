package main

import (
	"context"
	"errors"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/qcow2"
)

// exitCode maps an error to cryptimg's exit status, in one place.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, header.ErrNoMatchingKeyslot),
		errors.Is(err, image.ErrVolumeKeyMismatch):
		return exitNoKey
	case errors.Is(err, image.ErrBusy),
		errors.Is(err, image.ErrJournalMissing),
		errors.Is(err, header.ErrMarked):
		return exitBusy
	case errors.Is(err, image.ErrJournalCorrupt):
		return exitBadImage
	case errors.Is(err, header.ErrNotLUKS),
		errors.Is(err, header.ErrCorrupt),
		errors.Is(err, image.ErrTruncated),
		errors.Is(err, image.ErrNotEncrypted),
		errors.Is(err, qcow2.ErrCorrupt):
		return exitBadImage
	case errors.As(err, &ue):
		return exitFailure
	default:
		return exitFailure
	}
}
