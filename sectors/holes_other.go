//go:build !linux

package sectors

import (
	"errors"
	"os"
)

var errNoSeekData = errors.New("SEEK_DATA not supported")

func fileFD(*os.File) (int, bool) { return 0, false }

func seekData(int, int64) (int64, bool, error) { return 0, false, errNoSeekData }

func seekHole(int, int64) (int64, error) { return 0, errNoSeekData }
