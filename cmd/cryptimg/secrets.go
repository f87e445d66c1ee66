package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"golang.org/x/term"
)

// maxKeyFileSize is cryptsetup's compiled-in key file limit (8192 KiB).
const maxKeyFileSize = 8192 * 1024

// keyOptions are the cryptsetup-style key flags.
type keyOptions struct {
	keyFile       string
	keyfileOffset int64
	keyfileSize   int64
	newKey        bool // the --new-key-file flags, for messages
	// tokens, when the command has the token flags, are tried first
	// (unlockWithTokens).
	tokens *tokenOptions
}

func (k *keyOptions) addFlags(cmd interface {
	StringVarP(*string, string, string, string, string)
	Int64Var(*int64, string, int64, string)
}) {
	cmd.StringVarP(&k.keyFile, "key-file", "d", "", "read the key from FILE as raw bytes (- for stdin); newlines are not stripped")
	cmd.Int64Var(&k.keyfileOffset, "keyfile-offset", 0, "skip this many bytes at the start of the key file")
	cmd.Int64Var(&k.keyfileSize, "keyfile-size", 0, "read at most this many bytes of the key file (0 = all)")
}

var errNoKey = errors.New("no key given: use --key-file FILE (- for stdin), or run on a terminal to be prompted")

// readKey returns the secret from the key file or, with none, from a
// prompt on the terminal; confirm asks twice, for a new passphrase. The
// secret is in package secmem's memory (locked where allowed, out of core
// dumps). The caller clears the returned slice: secmem.Free also returns
// the memory, clear leaves a wiped page mapped until the process exits.
func readKey(g *globalOptions, k keyOptions, prompt string, confirm bool) ([]byte, error) {
	if k.keyFile != "" {
		key, err := readKeyFile(g, k)
		if err == nil && key[len(key)-1] == '\n' {
			name := "the key file " + k.keyFile
			if k.keyFile == stdio {
				name = "the key read from stdin"
			}
			g.newlineKeys = append(g.newlineKeys, name)
		}
		return key, err
	}
	if k.keyfileOffset != 0 || k.keyfileSize != 0 {
		return nil, usagef("--keyfile-offset and --keyfile-size need --key-file")
	}
	tty, err := openTerminal(g)
	if err != nil {
		return nil, errNoKey
	}
	defer tty.Close()
	key, err := promptOnce(tty, prompt)
	if err != nil {
		return nil, err
	}
	if confirm {
		again, err := promptOnce(tty, "Verify passphrase: ")
		if err != nil {
			secmem.Free(key)
			return nil, err
		}
		same := bytes.Equal(key, again)
		secmem.Free(again)
		if !same {
			secmem.Free(key)
			return nil, usagef("passphrases do not match")
		}
	}
	return key, nil
}

func openTerminal(g *globalOptions) (*os.File, error) {
	if !g.stdinIsTerminal() {
		return nil, errNoKey
	}
	return os.OpenFile("/dev/tty", os.O_RDWR, 0)
}

func promptOnce(tty *os.File, prompt string) ([]byte, error) {
	fmt.Fprint(tty, prompt)
	typed, err := term.ReadPassword(int(tty.Fd()))
	fmt.Fprintln(tty)
	if err != nil {
		return nil, fmt.Errorf("failed to read passphrase: %w", err)
	}
	if len(typed) == 0 {
		return nil, usagef("empty passphrase")
	}
	// x/term reads into buffers of its own, out of reach: clear the
	// one it returns, at least.
	key := secmem.Clone(typed)
	clear(typed)
	return key, nil
}

func readKeyFile(g *globalOptions, k keyOptions) ([]byte, error) {
	if k.keyfileOffset < 0 || k.keyfileSize < 0 {
		return nil, usagef("--keyfile-offset and --keyfile-size must not be negative")
	}
	if k.keyfileSize > maxKeyFileSize {
		// Nothing larger is read without it either; and limit+1 below
		// must not overflow.
		flag := map[bool]string{false: "--keyfile-size", true: "--new-keyfile-size"}[k.newKey]
		return nil, usagef("%s %d is over the key file limit of %d bytes (%d KiB)", flag, k.keyfileSize, maxKeyFileSize, maxKeyFileSize/1024)
	}
	var r io.Reader
	if k.keyFile == "-" {
		r = g.stdin
	} else {
		f, err := os.Open(k.keyFile)
		if err != nil {
			return nil, fmt.Errorf("failed to open key file: %w", err)
		}
		defer f.Close()
		r = f
	}
	if k.keyfileOffset > 0 {
		if _, err := io.CopyN(io.Discard, r, k.keyfileOffset); err != nil {
			return nil, fmt.Errorf("key file is shorter than --keyfile-offset %d", k.keyfileOffset)
		}
	}
	limit := int64(maxKeyFileSize)
	if k.keyfileSize > 0 {
		limit = k.keyfileSize
	}
	buf, n, err := readUpTo(r, limit+1)
	if err != nil {
		return nil, fmt.Errorf("failed to read key file: %w", err)
	}
	if int64(n) > limit {
		if k.keyfileSize > 0 {
			n = int(limit)
		} else {
			secmem.Free(buf)
			return nil, usagef("key file is larger than %d KiB", maxKeyFileSize/1024)
		}
	}
	if k.keyfileSize > 0 && int64(n) < k.keyfileSize {
		secmem.Free(buf)
		return nil, usagef("key file is shorter than --keyfile-size %d", k.keyfileSize)
	}
	if n == 0 {
		secmem.Free(buf)
		return nil, usagef("key file is empty")
	}
	key := secmem.Clone(buf[:n])
	secmem.Free(buf)
	return key, nil
}

// readUpTo reads r to its end or to max bytes, into a buffer of package
// secmem that grows as the data comes (a key file is small; max is 8 MiB):
// each buffer left behind is freed, as is the last one on an error. It
// returns the buffer, for secmem.Free, and how much of it holds data.
func readUpTo(r io.Reader, max int64) ([]byte, int, error) {
	buf := secmem.Alloc(int(min(max, 4096)))
	n := 0
	for {
		m, err := io.ReadFull(r, buf[n:])
		n += m
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return buf, n, nil
		case err != nil:
			secmem.Free(buf)
			return nil, 0, err
		case int64(n) == max:
			return buf, n, nil
		}
		grown := secmem.Alloc(int(min(max, 2*int64(len(buf)))))
		copy(grown, buf[:n])
		secmem.Free(buf)
		buf = grown
	}
}

// checkKeySlot checks a --key-slot value before anything is opened: -1 (try
// every slot) or a slot number some LUKS version has. Whether that slot
// exists in a given image is the header's business (Header.CheckSlot).
func checkKeySlot(slot int) error {
	if slot < -1 || slot >= header.MaxSlots {
		return usagef("--key-slot must be between 0 and %d", header.MaxSlots-1)
	}
	return nil
}

// unlockImage unlocks e with a token when the key options' token flags
// allow (unlockWithTokens), else asks for a key with the key options (a
// key file, or the terminal with prompt) and unlocks e with it: slot -1 tries every active
// slot. Errors name the image. The key read is freed; the caller clears
// the returned Key.
func unlockImage(g *globalOptions, e *image.Encrypted, k keyOptions, name, prompt string, slot int) (*image.Key, error) {
	if tk, err := unlockWithTokens(g, e, k, name, slot); err != nil || tk != nil {
		if err != nil {
			return nil, err
		}
		clear(tk.Passphrase)
		return tk.Key, nil
	}
	key, err := readKey(g, k, prompt, false)
	if err != nil {
		return nil, err
	}
	defer secmem.Free(key)
	e.AllowCost = g.slowKDF
	e.AllowNullCipher = g.nullOK
	start := time.Now()
	uk, err := e.Unlock(key, slot)
	g.kdf += time.Since(start)
	var ce *image.CostError
	if errors.As(err, &ce) && !g.batch && g.stdinIsTerminal() {
		// A person can decide; a script gets the error and the flag.
		if cerr := confirm(g, fmt.Sprintf("%s: %v.", name, err)); cerr != nil {
			return nil, cerr
		}
		e.AllowCost = true
		start = time.Now()
		uk, err = e.Unlock(key, slot)
		g.kdf += time.Since(start)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return uk, nil
}

// passPrompt is the usual prompt for the passphrase of an image.
func passPrompt(path string) string { return "Enter passphrase for " + path + ": " }
