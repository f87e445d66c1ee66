package image

import (
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
)

// detachedContainer is a payload (raw, or a dm-integrity device) whose
// LUKS header is in a file of its own, as cryptsetup's --header keeps it:
// the payload starts at the header's payload offset (normally 0) of the
// data file and runs to its end or the header's fixed size. Everything
// but where the header lives is the payload's.
type detachedContainer struct {
	container
	luks luksArea
}

func (c *detachedContainer) area() luksArea { return c.luks }

// room is the whole header file: a new area may grow it.
func (c *detachedContainer) room() int64 { return c.luks.limit }

// newDetached is the container of data (dataSize bytes, named dataName)
// under the detached header h in a.
func newDetached(a luksArea, h header.Header, data io.ReaderAt, dataSize int64, dataName string) (container, error) {
	p, err := newPayload(a, h, data, h.Info().PayloadOffset, dataSize, dataName)
	if err != nil {
		return nil, err
	}
	return &detachedContainer{container: p, luks: a}, nil
}

// headerOnly is the container of a detached header file opened without
// its data (OpenHeader): the key and header commands change only the
// header, and there is no payload.
func headerOnly(a luksArea, h header.Header) container {
	p := &rawContainer{luks: a, data: a.r, base: h.Info().PayloadOffset}
	return &detachedContainer{container: p, luks: a}
}

// openHeaderFile reads the header of the detached header file f.
func openHeaderFile(f *os.File) (luksArea, header.Header, error) {
	size, err := regularSize(f)
	if err != nil {
		return luksArea{}, nil, err
	}
	if qcow2.IsQcow2(f) {
		return luksArea{}, nil, fmt.Errorf("%w: a qcow2 image is not a detached header", header.ErrNotLUKS)
	}
	h, err := header.Read(f, 0, size)
	if err != nil {
		return luksArea{}, nil, err
	}
	return luksArea{r: f, limit: size, own: true}, h, nil
}
