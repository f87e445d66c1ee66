package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

// openImage opens an encrypted image read-only under a shared lock; errors
// name it. The caller closes the file.
func openImage(g *globalOptions, path string) (*os.File, *image.Encrypted, error) {
	return openEncrypted(g, path, openForRead)
}

// openEncrypted opens path with open and reads its LUKS header; errors name
// the image, and the file is closed on failure. With --header the header
// file is opened instead, as cryptsetup's key and header commands change
// only the header file; path must exist. A header read around a damaged
// or stale LUKS2 copy is warned about.
func openEncrypted(g *globalOptions, path string, open func(string) (*os.File, error)) (*os.File, *image.Encrypted, error) {
	f, e, err := readEncrypted(g, path, open)
	if err == nil {
		warnHeaderCopy(g, f.Name(), e.Header)
	}
	return f, e, err
}

// warnHeaderCopy warns that the LUKS2 header of path was read from its
// secondary copy, the primary being damaged, lost or older, or that its
// secondary is damaged or older: every command works from the good copy,
// writes nothing it would not write otherwise, and repair rewrites both.
func warnHeaderCopy(g *globalOptions, path string, h header.Header) {
	if l2, ok := h.(*header.LUKS2); ok && l2.Warning != "" {
		fmt.Fprintf(g.stderr, "cryptimg: warning: %s: %s; run cryptimg repair\n", path, l2.Warning)
	}
}

// readEncrypted is openEncrypted without the warning.
func readEncrypted(g *globalOptions, path string, open func(string) (*os.File, error)) (*os.File, *image.Encrypted, error) {
	hdr := g.header != ""
	path, err := headerPath(g, path)
	if err != nil {
		return nil, nil, err
	}
	f, err := open(path)
	if err != nil {
		return nil, nil, err
	}
	var e *image.Encrypted
	if hdr {
		e, err = image.OpenHeader(f)
	} else {
		e, err = image.Open(f)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, image.ErrDetached) {
			err = fmt.Errorf("%w; name it with --header HEADER and give the data file as the image", err)
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	e.AllowNullCipher = g.nullOK
	return f, e, nil
}

// headerPath is the file a header-only command works on: the --header file
// if one is given (the image must exist, as cryptsetup requires the device),
// else the image.
func headerPath(g *globalOptions, image string) (string, error) {
	if g.header == "" {
		return image, nil
	}
	if _, err := os.Stat(image); err != nil {
		return "", err
	}
	return g.header, nil
}

// openWithHeader reads the encrypted image f, with its header in hdr if
// that is not nil.
func openWithHeader(f, hdr *os.File) (*image.Encrypted, error) {
	if hdr != nil {
		return image.OpenDetached(hdr, f)
	}
	return image.Open(f)
}

// openImageRW opens an encrypted image for a header update, locked
// against other cryptimg processes (exit 5 if one holds it).
func openImageRW(g *globalOptions, path string) (*os.File, *image.Encrypted, error) {
	return openEncrypted(g, path, openLocked)
}

// openData opens the encrypted image src (named in), with its header in
// the --header file if one is given, under a shared lock; the caller calls
// the returned function when done with the image.
func openData(g *globalOptions, src *os.File, in string) (*image.Encrypted, func(), error) {
	if g.header == "" {
		e, err := openDataWith(src, nil, in)
		if err != nil {
			return nil, nil, err
		}
		warnHeaderCopy(g, in, e.Header)
		e.AllowNullCipher = g.nullOK
		return e, func() {}, nil
	}
	hf, err := openForRead(g.header)
	if err != nil {
		return nil, nil, err
	}
	e, err := openDataWith(src, hf, in)
	if err != nil {
		hf.Close()
		return nil, nil, err
	}
	warnHeaderCopy(g, g.header, e.Header)
	e.AllowNullCipher = g.nullOK
	return e, func() { hf.Close() }, nil
}

// openDataWith reads the encrypted image src (named in), with its header
// in hf, or in src if hf is nil.
func openDataWith(src, hf *os.File, in string) (*image.Encrypted, error) {
	e, err := openWithHeader(src, hf)
	if errors.Is(err, image.ErrDetached) {
		err = fmt.Errorf("%w; name it with --header HEADER and give the data file as the image", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	return e, nil
}

// openLUKS2RW opens path read-write and locked, and requires LUKS2.
func openLUKS2RW(g *globalOptions, path string) (*os.File, *image.Encrypted, *header.LUKS2, error) {
	return openLUKS2(g, path, openEncrypted, openLocked)
}

// openLUKS2 opens path (or the --header file) with open, reads it with
// read (openEncrypted, which warns about a header read from its secondary
// copy, or readEncrypted, which does not: for repair), and requires LUKS2.
func openLUKS2(g *globalOptions, path string, read func(*globalOptions, string, func(string) (*os.File, error)) (*os.File, *image.Encrypted, error), open func(string) (*os.File, error)) (*os.File, *image.Encrypted, *header.LUKS2, error) {
	f, e, err := read(g, path, open)
	if err != nil {
		return nil, nil, nil, err
	}
	h, ok := e.Header.(*header.LUKS2)
	if !ok {
		f.Close()
		return nil, nil, nil, usagef("%s is LUKS%d; this command needs LUKS2", path, e.Header.Info().Version)
	}
	return f, e, h, nil
}
