package main

// "-" as the INPUT or OUTPUT of encrypt and decrypt: stdin and stdout,
// for raw images. The key derivation runs before any data is read, the
// progress goes to stderr, and nothing is ever written to a file named
// "-".

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/spf13/cobra"
)

const stdio = "-"

// streamOut is where a streamed result goes: stdout, or a file written
// through a temporary file as always. commit makes it final.
func streamOut(g *globalOptions, out string, force bool) (w io.Writer, commit func() error, done func(), err error) {
	if out == stdio {
		return g.stdout, func() error { return nil }, func() {}, nil
	}
	if isNullDevice(out) {
		return io.Discard, func() error { return nil }, func() {}, nil
	}
	dst, done, err := createOutput(g, out, force)
	if err != nil {
		return nil, nil, nil, err
	}
	bw := bufio.NewWriterSize(dst.File, 1<<20)
	return bw, func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		return dst.Commit()
	}, done, nil
}

// checkStream refuses what a stream cannot carry, before anything is
// read.
func checkStream(in, out string, asJSON bool, format string) error {
	if out == stdio && asJSON {
		return usagef("--json would share stdout with the image; use it with an OUTPUT file")
	}
	if format == string(image.Qcow2) {
		return usagef("qcow2 %v; streams carry raw images only", image.ErrNotStreamable)
	}
	if in == stdio && out == stdio {
		return nil
	}
	if in != stdio && out != stdio && in == out {
		return usagef("%s: %v", out, image.ErrSameFile)
	}
	return nil
}

func runEncryptStream(cmd *cobra.Command, g *globalOptions, o encryptOptions, in, out string) error {
	if err := checkStream(in, out, o.json, o.outputFormat); err != nil {
		return err
	}
	params, err := o.params()
	if err != nil {
		return err
	}
	if params.Integrity != "" {
		return usagef("--integrity %v: its layout depends on the size of the input", image.ErrNotStreamable)
	}
	if g.header != "" {
		return usagef("--header and streams: give the data as a file")
	}
	if params.Version == 2 && params.SectorSize == 0 {
		// The size of a stream is not known: 512-byte sectors fit any.
		params.SectorSize = image.SectorSize
	}
	if out != stdio {
		if err := checkOutputPath(in, out, o.force); err != nil {
			return err
		}
	}
	var src io.Reader
	total := int64(-1) // the plaintext's size, when the input is a file
	if in == stdio {
		if o.key.keyFile == stdio || o.volumeKeyFile == stdio || o.masterKeyFile == stdio {
			return usagef("stdin carries the image; read the keys from files")
		}
		src = g.stdin
	} else {
		f, err := openSource(in)
		if err != nil {
			return err
		}
		defer f.Close()
		if qcow2.IsQcow2(f) {
			return usagef("%s is qcow2, which needs a seekable output: give OUTPUT as a file", in)
		}
		st, err := f.Stat()
		if err != nil {
			return err
		}
		src, total = f, st.Size()
	}
	if err := o.newVolumeKey(g, &params); err != nil {
		return err
	}
	defer clear(params.VolumeKey)
	key, err := readKey(g, o.key, "Enter passphrase for "+out+": ", true)
	if err != nil {
		return err
	}
	defer clear(key)
	// The key derivation, before any data is read.
	start := time.Now()
	fh, err := image.FormatHeader(key, params)
	g.kdf += time.Since(start)
	if err != nil {
		return err
	}
	defer fh.Clear()
	br := bufio.NewReaderSize(src, 1<<20)
	if head, _ := br.Peek(8); !o.force && header.IsLUKSMagic(head) {
		return usagef("%s is already a LUKS image: encrypting it would encrypt it twice; pass --force to do so", in)
	}
	return streamTo(g, "encrypt", in, out, o.force, o.json, total, volumeOf(fh.Header, 0), func(w io.Writer, p image.Pipeline) (int64, error) {
		return image.EncryptStream(cmd.Context(), w, br, fh, p)
	})
}

func runDecryptStream(cmd *cobra.Command, g *globalOptions, o decryptOptions, in, out string) error {
	if err := checkStream(in, out, o.json, o.outputFormat); err != nil {
		return err
	}
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	if g.header != "" && in == stdio {
		return usagef("--header and streams: give the data as a file")
	}
	if out != stdio && !isNullDevice(out) {
		if err := checkOutputPath(in, out, o.force); err != nil {
			return err
		}
	}
	if in != stdio {
		// A file to stdout: the usual reader, then the plaintext streamed.
		f, err := openSource(in)
		if err != nil {
			return err
		}
		defer f.Close()
		if g.header != "" || qcow2.IsQcow2(f) {
			return decryptViewToStream(cmd, g, o, f, in, out)
		}
		return decryptFileToStream(cmd, g, o, f, in, out)
	}
	if o.key.keyFile == stdio {
		return usagef("stdin carries the image; read the key from a file")
	}
	e, payload, err := image.OpenStream(g.stdin)
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	warnHeaderCopy(g, "stdin", e.Header)
	return decryptStreamed(cmd, g, o, e, payload, -1, in, out)
}

// decryptStreamed unlocks e and writes the plaintext of payload, total
// bytes (-1: not known), to out.
func decryptStreamed(cmd *cobra.Command, g *globalOptions, o decryptOptions, e *image.Encrypted, payload io.Reader, total int64, in, out string) error {
	k, err := unlockImage(g, e, o.key, inName(in), passPrompt(inName(in)), o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	return streamTo(g, "decrypt", in, out, o.force, o.json, total, volumeOf(e.Header, k.Slot), func(w io.Writer, p image.Pipeline) (int64, error) {
		return e.DecryptStream(cmd.Context(), w, payload, k, p)
	})
}

// streamTo runs op, which writes a raw image's stream to w, into out
// (stdout or a file made through a temporary one), with progress, and
// reports it. total is the size of the data if the CLI knows it (a file
// read as a stream), else -1: progress then has a total where the stream
// alone could not give one.
func streamTo(g *globalOptions, op, in, out string, force, asJSON bool, total int64, vol volumeJSON, run func(io.Writer, image.Pipeline) (int64, error)) error {
	w, commit, done, err := streamOut(g, out, force)
	if err != nil {
		return err
	}
	defer done()
	prog := g.newProgress(op)
	p := g.pipeline(prog)
	if total >= 0 {
		p.Progress = func(done, t int64) {
			if t < 0 {
				t = total
			}
			prog.update(done, t)
		}
	}
	start := time.Now()
	n, err := run(w, p)
	prog.finish(err == nil)
	if err != nil {
		return streamErr(err, in, out)
	}
	if err := commit(); err != nil {
		return streamErr(err, in, out)
	}
	return g.report(asJSON, summary{Op: op, Input: in, Output: out, Format: string(image.Raw),
		Bytes: n, Seconds: time.Since(start).Seconds(), volumeJSON: vol})
}

// decryptViewToStream decrypts to stdout an image file that is not read
// as a stream: qcow2, whose clusters lie in any order, or data whose
// header is in a --header file. The plaintext is the image's read-only
// view, the guest's disk from its first byte to its last, unallocated
// clusters as zeros.
func decryptViewToStream(cmd *cobra.Command, g *globalOptions, o decryptOptions, f *os.File, in, out string) error {
	e, closeHeader, err := openData(g, f, in)
	if err != nil {
		return err
	}
	defer closeHeader()
	if e.Authenticated() {
		return decryptAuthToStream(cmd, g, o, e, in, out)
	}
	if o.allowCorrupt {
		return usagef("--allow-corrupt is for images with integrity protection")
	}
	k, err := unlockImage(g, e, o.key, in, passPrompt(in), o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	v, err := e.View(f, k, true)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	defer v.Close()
	size := v.Size()
	return streamTo(g, "decrypt", in, out, o.force, o.json, size, volumeOf(e.Header, k.Slot), func(w io.Writer, p image.Pipeline) (int64, error) {
		return copyView(cmd.Context(), w, v, size, p)
	})
}

// copyView writes size bytes of v to w in chunks of the pipeline's size,
// reporting progress.
func copyView(ctx context.Context, w io.Writer, v io.ReaderAt, size int64, p image.Pipeline) (int64, error) {
	chunk := int64(p.ChunkSize)
	if chunk <= 0 {
		chunk = 1 << 20
	}
	buf := make([]byte, chunk)
	defer clear(buf)
	var done int64
	if p.Progress != nil {
		p.Progress(0, size)
	}
	for done < size {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		b := buf[:min(chunk, size-done)]
		if _, err := v.ReadAt(b, done); err != nil && !(errors.Is(err, io.EOF) && done+int64(len(b)) == size) {
			return done, err
		}
		if _, err := w.Write(b); err != nil {
			return done, err
		}
		done += int64(len(b))
		if p.Progress != nil {
			p.Progress(done, size)
		}
	}
	return done, nil
}

// isNullDevice reports whether path is the null device itself (or a link
// to it): an OUTPUT that discards, as benchmark scripts give it. Other
// devices, and other nodes with its numbers, are refused as outputs.
func isNullDevice(path string) bool {
	if path == stdio {
		return false
	}
	a, err := os.Stat(path)
	if err != nil || a.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	b, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(a, b)
}

// decryptFileToStream decrypts a raw LUKS image file to stdout: the file
// is read as a stream.
func decryptFileToStream(cmd *cobra.Command, g *globalOptions, o decryptOptions, f *os.File, in, out string) error {
	// Integrity protection: the file is read where its geometry puts each
	// area's data and tags, and the plaintext streamed. image.Open tells
	// from the header's metadata; the stream path would first read the
	// whole header area, 16 MiB of new memory for a LUKS2 image.
	ae, openErr := image.Open(f)
	if openErr == nil && ae.Authenticated() {
		warnHeaderCopy(g, in, ae.Header)
		return decryptAuthToStream(cmd, g, o, ae, in, out)
	}
	if openErr == nil && ae.Format == image.Raw {
		// A raw image file: the workers read it themselves, in
		// parallel, and only the writes to the stream keep order.
		warnHeaderCopy(g, in, ae.Header)
		k, err := unlockImage(g, ae, o.key, in, passPrompt(in), o.keySlot)
		if err != nil {
			return err
		}
		defer k.Clear()
		return streamTo(g, "decrypt", in, out, o.force, o.json, ae.PayloadSize, volumeOf(ae.Header, k.Slot), func(w io.Writer, p image.Pipeline) (int64, error) {
			return ae.DecryptFileStream(cmd.Context(), w, k, p)
		})
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	e, payload, err := image.OpenStream(io.NewSectionReader(f, 0, st.Size()))
	if errors.Is(err, image.ErrNotStreamable) && openErr != nil {
		// An image with integrity protection that image.Open refused:
		// its error says why.
		return fmt.Errorf("%s: %w", in, openErr)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	warnHeaderCopy(g, in, e.Header)
	total := int64(-1)
	if openErr == nil {
		total = ae.PayloadSize
	}
	return decryptStreamed(cmd, g, o, e, payload, total, in, out)
}

// streamErr says which end of a stream failed: a closed pipe on stdout
// ("broken pipe") is the reader's doing.
func streamErr(err error, in, out string) error {
	if errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("writing to %s: the reading end of the pipe was closed (%w)", outName(out), err)
	}
	return fmt.Errorf("%s to %s: %w", inName(in), outName(out), err)
}

// inName and outName name a command's input and output for messages:
// "-" is stdin on the one side and stdout on the other.
func inName(s string) string {
	if s == stdio {
		return "stdin"
	}
	return s
}

func outName(s string) string {
	if s == stdio {
		return "stdout"
	}
	return s
}

// decryptAuthToStream decrypts an authenticated image file to stdout:
// every sector is checked before it is written. Without --allow-corrupt
// the output stops before the first bad sector's chunk and the command
// fails naming the sector.
func decryptAuthToStream(cmd *cobra.Command, g *globalOptions, o decryptOptions, e *image.Encrypted, in, out string) error {
	k, err := unlockImage(g, e, o.key, in, passPrompt(in), o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	return streamTo(g, "decrypt", in, out, o.force, o.json, -1, volumeOf(e.Header, k.Slot), func(w io.Writer, p image.Pipeline) (int64, error) {
		n, err := e.DecryptAuthStream(cmd.Context(), w, k, p, o.allowCorrupt)
		var bad *image.CorruptError
		if o.allowCorrupt && errors.As(err, &bad) {
			// Written, with zeros for the bad sectors: said ahead of
			// the summary, as decrypt to a file does.
			g.warnZeroed(bad, in, outName(out))
			err = nil
		}
		return n, err
	})
}
