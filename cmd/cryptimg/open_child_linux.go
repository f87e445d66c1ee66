//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

// startBackground re-runs open in a detached child that takes the
// unlocked volume key through a pipe, and returns once the child says the
// mount is ready (or why it failed). The child inherits the image src and
// the header file hf (nil without --header) open and locked, so that the
// lock passes to it with no moment unlocked, and lives as long as it does.
// k is nil for a plain image under verity flags: the child gets no key.
func startBackground(g *globalOptions, img, mnt string, o openOptions, k *image.Key, src, hf *os.File) error {
	vargs, err := o.verity.args()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	img, err = filepath.Abs(img)
	if err != nil {
		return err
	}
	keyR, keyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer keyR.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		keyW.Close()
		return err
	}
	defer readyR.Close()
	args := append([]string{"open"}, vargs...)
	if k != nil {
		args = append(args, "--key-slot", strconv.Itoa(k.Slot))
	}
	if g.header != "" {
		hdr, err := filepath.Abs(g.header)
		if err != nil {
			return err
		}
		args = append(args, "--header", hdr)
	}
	if o.readOnly {
		args = append(args, "--read-only")
	}
	cmd := exec.Command(exe, append(args, "--", img, mnt)...)
	cmd.Env = append(os.Environ(), openChildEnv+"=1")
	cmd.ExtraFiles = []*os.File{keyR, readyW, src}
	if hf != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, hf)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		keyW.Close()
		return fmt.Errorf("failed to start the background process: %w", err)
	}
	if k != nil {
		_, err = keyW.Write(k.VolumeKey())
	}
	keyW.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("failed to pass the key to the background process: %w", err)
	}
	msg, _ := io.ReadAll(readyR)
	if s := string(msg); s != "ok\n" {
		cmd.Process.Kill()
		cmd.Wait()
		if s == "" {
			return errors.New("the background process exited before mounting")
		}
		return errors.New(strings.TrimSpace(s))
	}
	cmd.Process.Release()
	if !g.quiet {
		fmt.Fprintf(g.stderr, "cryptimg: %s mounted at %s\n", img, filepath.Join(mnt, plainName(img)))
	}
	return nil
}

// inheritedFile is the file the parent passed on fd, which must be path's:
// the image (or header) it opened and locked.
func inheritedFile(fd uintptr, path string) (*os.File, error) {
	f := os.NewFile(fd, path)
	if f == nil {
		return nil, fmt.Errorf("%s: no inherited file on fd %d", path, fd)
	}
	fst, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: no inherited file on fd %d: %w", path, fd, err)
	}
	if st, err := os.Stat(path); err != nil || !os.SameFile(st, fst) {
		f.Close()
		return nil, fmt.Errorf("%s: the file inherited on fd %d is not this one", path, fd)
	}
	return f, nil
}

// childKey reads the volume key the parent passed on fd 3.
func childKey(e *image.Encrypted, slot int) (*image.Key, error) {
	f := os.NewFile(3, "key")
	if f == nil {
		return nil, errors.New("no key pipe")
	}
	defer f.Close()
	// Read straight into locked memory: io.ReadAll would leave the key in
	// the buffers it grows.
	buf := secmem.Alloc(header.MaxKeyBytes + 1)
	defer secmem.Free(buf)
	n, err := io.ReadFull(f, buf)
	if err != io.ErrUnexpectedEOF {
		if err == nil {
			err = errors.New("the key passed is too long")
		}
		return nil, err
	}
	return e.KeyFromVolume(buf[:n], slot)
}

// reportReady tells the waiting parent (fd 4) that the mount is up, or why
// not; in the foreground it does nothing.
func reportReady(child bool, err error) {
	if !child {
		return
	}
	f := os.NewFile(4, "ready")
	if f == nil {
		return
	}
	if err != nil {
		fmt.Fprintf(f, "%s\n", err)
	} else {
		fmt.Fprint(f, "ok\n")
	}
	f.Close()
	// Detach from the parent's stdio: it is gone or going.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		unix.Dup2(int(null.Fd()), 0)
		unix.Dup2(int(null.Fd()), 1)
		unix.Dup2(int(null.Fd()), 2)
		null.Close()
	}
}
