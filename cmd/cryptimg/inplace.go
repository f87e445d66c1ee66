package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/filelock"
	"github.com/spf13/cobra"
)

// interrupted adds to an error after the journal exists how to continue.
func interrupted(path, command string, err error) error {
	if errors.Is(err, image.ErrBusy) || errors.Is(err, image.ErrJournalMissing) || errors.Is(err, image.ErrNothingToResume) ||
		errors.Is(err, errAborted) || errors.Is(err, header.ErrNoMatchingKeyslot) {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, serr := os.Stat(path + image.JournalSuffix); serr == nil {
		return &resumableError{err: fmt.Errorf("%s: %w", path, err), command: command, path: path}
	}
	return fmt.Errorf("%s: %w", path, err)
}

// resumableError is the error of an in-place operation that left its
// journal: running command again on path continues it (hint).
type resumableError struct {
	err           error
	command, path string
}

func (e *resumableError) Error() string { return e.err.Error() }

func (e *resumableError) Unwrap() error { return e.err }

// inPlaceSummary is the result of reencrypt and in-place encrypt/decrypt.
type inPlaceSummary struct {
	MessageType string  `json:"message_type"`
	Op          string  `json:"op"`
	Image       string  `json:"image"`
	Format      string  `json:"format"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Resumed     bool    `json:"resumed"`
	Cipher      string  `json:"cipher,omitempty"`
	KeyBits     int     `json:"key_bits,omitempty"`
	Hash        string  `json:"hash,omitempty"`
	UUID        string  `json:"uuid,omitempty"`
	KeptSlots   []int   `json:"kept_slots,omitempty"`
	Removed     []int   `json:"removed_slots,omitempty"`
}

func reportInPlace(g *globalOptions, asJSON bool, path string, r *image.Result, d time.Duration) error {
	s := inPlaceSummary{
		MessageType: "summary", Op: map[image.Op]string{image.OpReencrypt: "reencrypt", image.OpEncrypt: "encrypt", image.OpDecrypt: "decrypt"}[r.Op],
		Image: path, Format: string(r.Format), Bytes: r.Bytes, Seconds: d.Seconds(), Resumed: r.Resumed,
		KeptSlots: r.Kept, Removed: r.Removed,
	}
	if r.Header != nil {
		i := r.Header.Info()
		s.Cipher, s.KeyBits, s.Hash, s.UUID = i.Cipher, i.KeyBytes*8, i.Hash, i.UUID
	}
	if asJSON {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	switch r.Op {
	case image.OpReencrypt:
		info(g, "reencrypted %s (%s, new %d-bit key, UUID %s, key slots %v kept, %v removed) in %.2fs", path, humanBytes(r.Bytes), s.KeyBits, s.UUID, r.Kept, r.Removed, s.Seconds)
	case image.OpEncrypt:
		info(g, "encrypted %s in place (%s, %s, %d-bit key, key slot 0) in %.2fs", path, humanBytes(r.Bytes), s.Cipher, s.KeyBits, s.Seconds)
	default:
		info(g, "decrypted %s in place (%s) in %.2fs", path, humanBytes(r.Bytes), s.Seconds)
	}
	return nil
}

func runEncryptInPlace(cmd *cobra.Command, g *globalOptions, o encryptOptions, path string) error {
	params, err := o.params()
	if err != nil {
		return err
	}
	if err := o.newVolumeKey(g, &params); err != nil {
		return err
	}
	defer clear(params.VolumeKey)
	if o.outputFormat != "" && o.outputFormat != string(image.Raw) {
		return usagef("--in-place makes raw LUKS images only")
	}
	if err := checkHotzone(o.hotzone); err != nil {
		return err
	}
	f, resuming, err := lockOp(path, image.OpEncrypt, o.resume)
	if err != nil {
		return err
	}
	defer f.Close()
	if resuming {
		info(g, "resuming the unfinished in-place encryption of %s (with the header it chose)", path)
	} else {
		plain, err := image.OpenPlain(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if plain.Format != image.Raw {
			return fmt.Errorf("%s: in-place encryption supports raw images only; use cryptimg encrypt INPUT OUTPUT for qcow2", path)
		}
		// A rerun after a completed run would encrypt the image twice
		// (cryptsetup: "Device ... is already LUKS device").
		if err := refuseLUKS(f, path, o.force, "it is encrypted already (use cryptimg reencrypt for a new key, or --force to encrypt it twice)"); err != nil {
			return err
		}
	}
	key, err := readKey(g, o.key, "Enter passphrase for "+path+": ", !resuming)
	if err != nil {
		return err
	}
	defer clear(key)
	prog := g.newProgress("encrypt")
	start := time.Now()
	eo := image.EncryptInPlaceOptions{
		Header: params, Passphrase: key,
		InPlaceOptions: image.InPlaceOptions{Window: o.hotzone, Resume: o.resume, Pipeline: g.pipeline(prog), AllowCost: g.slowKDF},
	}
	var r *image.Result
	if g.header != "" {
		hdr, err := createHeaderFile(g.header, resuming)
		if err != nil {
			return err
		}
		defer hdr.Close()
		r, err = image.EncryptDetachedInPlace(cmd.Context(), f, hdr, image.Sidecar(path), eo)
		if _, serr := os.Stat(path + image.JournalSuffix); err != nil && !resuming && serr != nil {
			os.Remove(g.header) // refused before it started: the file it made is empty
		}
	} else {
		r, err = image.EncryptInPlace(cmd.Context(), f, image.Sidecar(path), eo)
	}
	prog.finish(err == nil)
	if err != nil {
		return interrupted(path, "encrypt --in-place", err)
	}
	return reportInPlace(g, o.json, path, r, time.Since(start))
}

func runDecryptInPlace(cmd *cobra.Command, g *globalOptions, o decryptOptions, path string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	if o.outputFormat != "" && o.outputFormat != string(image.Raw) {
		return usagef("--in-place makes raw images only")
	}
	if err := checkHotzone(o.hotzone); err != nil {
		return err
	}
	f, resuming, err := lockOp(path, image.OpDecrypt, o.resume)
	if err != nil {
		return err
	}
	defer f.Close()
	var hdr *os.File
	if g.header != "" {
		if hdr, err = openForWrite(g.header); err != nil {
			return err
		}
		defer hdr.Close()
	}
	if resuming {
		info(g, "resuming the unfinished in-place decryption of %s", path)
	} else if _, err := openWithHeader(f, hdr); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	te, _ := openWithHeader(f, hdr) // tokens, when it opens (not while resuming)
	key, err := readKeyFor(g, te, o.key, path, "Enter passphrase for "+path+": ", o.keySlot)
	if err != nil {
		return err
	}
	defer clear(key)
	prog := g.newProgress("decrypt")
	start := time.Now()
	ipo := image.InPlaceOptions{Window: o.hotzone, Resume: o.resume, Pipeline: g.pipeline(prog), AllowCost: g.slowKDF}
	var r *image.Result
	if hdr != nil {
		r, err = image.DecryptDetachedInPlace(cmd.Context(), f, hdr, image.Sidecar(path), key, o.keySlot, ipo)
	} else {
		r, err = image.DecryptInPlace(cmd.Context(), f, image.Sidecar(path), key, o.keySlot, ipo)
	}
	prog.finish(err == nil)
	if err != nil {
		return interrupted(path, "decrypt --in-place", err)
	}
	return reportInPlace(g, o.json, path, r, time.Since(start))
}

// createHeaderFile opens the detached header file that encrypt --in-place
// --header fills at the end: a new file (mode 0600, its directory entry
// synced), or, when resuming, the one the first run made, or an empty one
// a run killed before it started left. It will hold the key slots: a
// symbolic link is refused (it would put them wherever it points), and a
// file reused gets mode 0600 whatever it had.
func createHeaderFile(path string, resuming bool) (*os.File, error) {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("--header %s is a symbolic link: give the header file's own path", path)
	}
	flag := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if resuming {
		flag = os.O_RDWR | os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, os.ErrExist) {
		// An empty one is left by a run killed before it started; a
		// header file with anything in it is someone's.
		if st, serr := os.Lstat(path); serr == nil && st.Mode().IsRegular() && st.Size() == 0 {
			f, err = os.OpenFile(path, os.O_RDWR, 0)
		} else {
			return nil, fmt.Errorf("%w: %s", image.ErrExists, path)
		}
	}
	if err != nil {
		return nil, err
	}
	// What was opened is the regular file checked above, not a link put
	// there since.
	fst, ferr := f.Stat()
	lst, lerr := os.Lstat(path)
	if ferr != nil || lerr != nil || !fst.Mode().IsRegular() || !os.SameFile(fst, lst) {
		f.Close()
		return nil, fmt.Errorf("--header %s changed while it was opened, or is not a regular file", path)
	}
	if fst.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("failed to make %s private (mode 0600): %w", path, err)
		}
	}
	if err := lockFile(f, path, filelock.Exclusive); err != nil {
		f.Close()
		return nil, err
	}
	d, err := os.Open(filepath.Dir(path))
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to sync the directory of %s: %w", path, err)
	}
	return f, nil
}
