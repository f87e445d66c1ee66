package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cryptimg/cryptimg/image"
)

// The background child of open --background finds the volume key on fd 3
// and reports readiness on fd 4; this variable tells it that it is one.
const openChildEnv = "CRYPTIMG_OPEN_CHILD"

// fuseName is the filesystem type suffix of our mounts ("fuse.cryptimg"),
// how close and the stale-mount check recognise them.
const fuseName = "cryptimg"

type openOptions struct {
	key        keyOptions
	keySlot    int
	readOnly   bool
	background bool
}

func newOpenCommand(g *globalOptions) *cobra.Command {
	var o openOptions
	cmd := &cobra.Command{
		Use:   "open [flags] IMAGE MOUNTPOINT",
		Short: "Mount the plaintext of an encrypted image as a file, through FUSE",
		Long: `Mount, through FUSE, a directory at MOUNTPOINT holding one file: the plaintext
of IMAGE, named after IMAGE with the extension .raw. Reads decrypt and writes
encrypt in place, so no plaintext is written to disk. Use the file like any
disk image: losetup, qemu, dd conv=notrunc. Its size is fixed.

open runs in the foreground until "cryptimg close MOUNTPOINT", SIGINT or
SIGTERM unmounts it; with --background it returns once the mount is ready.
As root it mounts directly; otherwise it needs fusermount3 (Debian: fuse3).
A mount left behind by a killed open is cleared by the next open or close.
` + exitStatusHelp,
		Example: `  cryptimg open --background -d key.bin disk.luks /mnt/disk
  losetup -f --show /mnt/disk/disk.raw
  cryptimg close /mnt/disk`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOpen(cmd.Context(), g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot (0-7)")
	f.BoolVarP(&o.readOnly, "read-only", "r", false, "mount read-only: the image is never written")
	f.BoolVar(&o.background, "background", false, "return once mounted, serving from a background process")
	return cmd
}

func newCloseCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "close MOUNTPOINT",
		Short: "Flush and unmount an image mounted by cryptimg open",
		Long: `Flush the image mounted at MOUNTPOINT to stable storage and unmount it; the
open process then exits. A stale mount (its open process was killed) is
cleared.
` + exitStatusHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClose(g, args[0])
		},
	}
}

func runOpen(ctx context.Context, g *globalOptions, o openOptions, img, mnt string) error {
	child := os.Getenv(openChildEnv) != ""
	reported := false
	err := openAndServe(ctx, g, o, img, mnt, child, &reported)
	if child && !reported {
		reportReady(true, err)
	}
	return err
}

func openAndServe(ctx context.Context, g *globalOptions, o openOptions, img, mnt string, child bool, reported *bool) error {
	if o.keySlot < -1 || o.keySlot > 7 {
		return usagef("--key-slot must be between 0 and 7")
	}
	mnt, err := filepath.Abs(mnt)
	if err != nil {
		return err
	}
	if err := checkFUSE(); err != nil {
		return err
	}
	if !child {
		if err := prepareMountpoint(g, mnt); err != nil {
			return err
		}
	}
	flag := os.O_RDWR
	if o.readOnly {
		flag = os.O_RDONLY
	}
	src, err := os.OpenFile(img, flag, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	e, err := image.Open(src)
	if err != nil {
		return fmt.Errorf("%s: %w", img, err)
	}
	var k *image.Key
	if child {
		k, err = childKey(e, o.keySlot)
	} else {
		var secret []byte
		secret, err = readKey(g, o.key, "Enter passphrase for "+img+": ", false)
		if err != nil {
			return err
		}
		k, err = e.Unlock(secret, o.keySlot)
		clear(secret)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", img, err)
	}
	defer k.Clear()
	if o.background && !child {
		return startBackground(g, img, mnt, o.readOnly, k)
	}
	v, err := e.View(src, k, o.readOnly)
	if err != nil {
		return fmt.Errorf("%s: %w", img, err)
	}
	server, name, err := mountView(v, img, mnt, o.readOnly)
	if err != nil {
		v.Close()
		return err
	}
	reportReady(child, nil)
	*reported = true
	if !g.quiet && !child {
		fmt.Fprintf(g.stderr, "cryptimg: %s mounted at %s; stop with cryptimg close %s or Ctrl-C\n",
			img, filepath.Join(mnt, name), mnt)
	}
	return serve(ctx, g, server, v, mnt)
}

// serve waits for the mount to go away (close, umount) or for a signal,
// which unmounts it, then flushes the view.
func serve(ctx context.Context, g *globalOptions, server *fuse.Server, v image.View, mnt string) error {
	// Unmounting and flushing may take longer than the second a copying
	// command gets after a signal: let it finish.
	g.graceful.Store(true)
	done := make(chan struct{})
	go func() {
		server.Wait()
		close(done)
	}()
	// Should the process be made to exit before the unmount below ends
	// (a second signal), leave no stale mount behind.
	if g.cleanup != nil {
		defer g.cleanup.add(func() { lazyUnmount(mnt) })()
	}
	var uerr error
	select {
	case <-done:
	case <-ctx.Done():
		if uerr = server.Unmount(); uerr != nil {
			// Busy (a loop device or open file): detach it, so nothing
			// stale is left behind once the users let go.
			lazyUnmount(mnt)
			uerr = fmt.Errorf("%s was busy and was detached lazily: %w", mnt, uerr)
		}
		select {
		case <-done:
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("failed to flush the image: %w", err)
	}
	return uerr
}

// checkFUSE gives a clear error when FUSE cannot work here. Root opens
// /dev/fuse itself; anyone else goes through the setuid fusermount3,
// which opens it whatever its permissions.
func checkFUSE() error {
	if os.Geteuid() != 0 {
		if _, err := os.Stat("/dev/fuse"); err != nil {
			return fmt.Errorf("FUSE is unavailable: %w (load the fuse module; in a container, pass --device /dev/fuse)", err)
		}
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return errors.New("FUSE needs fusermount3 when not root, and it is not installed (Debian: apt-get install fuse3)")
		}
		return nil
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("FUSE is unavailable: %w (load the fuse module; in a container, pass --device /dev/fuse)", err)
	}
	f.Close()
	return nil
}

// prepareMountpoint clears a stale mount at mnt and checks that it is a
// directory that nothing is mounted on.
func prepareMountpoint(g *globalOptions, mnt string) error {
	if stale, err := clearStale(mnt); err != nil {
		return err
	} else if stale && !g.quiet {
		fmt.Fprintf(g.stderr, "cryptimg: cleared a stale mount at %s\n", mnt)
	}
	st, err := os.Stat(mnt)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", mnt)
	}
	if m, ok := findMount(mnt); ok {
		return fmt.Errorf("%s: already mounted (%s); cryptimg close it first", mnt, m.fstype)
	}
	return nil
}

// clearStale detects a FUSE mount whose server is gone (stat fails with
// ENOTCONN) and detaches it.
func clearStale(mnt string) (bool, error) {
	_, err := os.Stat(mnt)
	if !errors.Is(err, syscall.ENOTCONN) {
		return false, nil
	}
	if err := lazyUnmount(mnt); err != nil {
		return true, fmt.Errorf("%s: failed to clear a stale mount: %w", mnt, err)
	}
	return true, nil
}

// lazyUnmount detaches mnt now and frees it when its last user is gone.
func lazyUnmount(mnt string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	out, err := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u -z: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func unmount(mnt string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(mnt, 0)
	}
	out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// viewFile is the single file of the mount.
type viewFile struct {
	fs.Inode
	v        image.View
	readOnly bool
	mtime    time.Time
}

var (
	_ fs.NodeGetattrer = (*viewFile)(nil)
	_ fs.NodeSetattrer = (*viewFile)(nil)
	_ fs.NodeOpener    = (*viewFile)(nil)
	_ fs.NodeReader    = (*viewFile)(nil)
	_ fs.NodeWriter    = (*viewFile)(nil)
	_ fs.NodeFsyncer   = (*viewFile)(nil)
	_ fs.NodeFlusher   = (*viewFile)(nil)
)

func (f *viewFile) attr(out *fuse.Attr) {
	out.Mode = syscall.S_IFREG | 0o600
	if f.readOnly {
		out.Mode = syscall.S_IFREG | 0o400
	}
	out.Size = uint64(f.v.Size())
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.Nlink = 1
	out.Uid, out.Gid = uint32(os.Getuid()), uint32(os.Getgid())
	out.SetTimes(&f.mtime, &f.mtime, &f.mtime)
}

func (f *viewFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.attr(&out.Attr)
	return 0
}

// Setattr accepts only what keeps the file as it is: the size is fixed,
// so truncation (dd without conv=notrunc) fails with EPERM.
func (f *viewFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != f.v.Size() {
		return syscall.EPERM
	}
	f.attr(&out.Attr)
	return 0
}

func (f *viewFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if f.readOnly && flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	if flags&syscall.O_TRUNC != 0 && f.v.Size() != 0 {
		return nil, 0, syscall.EPERM
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *viewFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := f.v.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *viewFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := f.v.WriteAt(data, off)
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

func (f *viewFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return errno(f.v.Sync())
}

func (f *viewFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// errno maps view errors to what a file system returns.
func errno(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, image.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, image.ErrBeyondEnd):
		return syscall.ENOSPC
	case errors.As(err, &en):
		return en
	}
	return syscall.EIO
}

// mountView mounts a directory holding the view as one file, with 1 MiB
// requests and direct I/O (no page cache: every byte goes through the
// view once).
func mountView(v image.View, img, mnt string, readOnly bool) (*fuse.Server, string, error) {
	name := plainName(img)
	file := &viewFile{v: v, readOnly: readOnly, mtime: time.Now()}
	root := &fs.Inode{}
	sec := time.Hour // nothing else changes the tree or the size
	opts := &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			FsName:        fmt.Sprintf("cryptimg:%d", os.Getpid()),
			Name:          fuseName,
			MaxWrite:      1 << 20,
			MaxBackground: 64,
			DirectMount:   os.Geteuid() == 0,
			DisableXAttrs: true,
		},
		OnAdd: func(ctx context.Context) {
			ch := root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
			root.AddChild(name, ch, true)
		},
	}
	if readOnly {
		// Direct mounts take flags; fusermount3 takes the option string.
		opts.MountOptions.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY
		if os.Geteuid() != 0 {
			opts.MountOptions.Options = append(opts.MountOptions.Options, "ro")
		}
	}
	server, err := fuse.NewServer(fs.NewNodeFS(root, opts), mnt, &opts.MountOptions)
	if err == nil {
		go server.Serve()
		err = waitMounted(mnt, name)
		if err != nil {
			server.Unmount()
		}
	}
	if err != nil {
		if os.Geteuid() != 0 {
			return nil, "", fmt.Errorf("failed to mount %s through fusermount3: %w (it must be setuid root and able to open /dev/fuse; or run as root)", mnt, err)
		}
		return nil, "", fmt.Errorf("failed to mount %s: %w", mnt, err)
	}
	return server, name, nil
}

// waitMounted returns once the new mount at mnt answers a lookup of its
// file, which the serving goroutines answer. It stands in for go-fuse's
// WaitMount, whose "poll hack" opens a file in the mount from this very
// process: killed (SIGKILL) while that file is open, the process would
// flush it on exit to the server it is itself, and hang in D state for
// good, with the mount stuck. A stat holds nothing open, and a lookup of
// the file, unlike a stat of the mount point, leaves no cached attributes
// of the root that would hide a dead server from the next stat.
func waitMounted(mnt, name string) error {
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(mnt, name))
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the mount at %s did not answer within 30 s", mnt)
	}
}

// startBackground re-runs open in a detached child that takes the
// unlocked volume key through a pipe, and returns once the child says the
// mount is ready (or why it failed).
func startBackground(g *globalOptions, img, mnt string, readOnly bool, k *image.Key) error {
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
	args := []string{"open", "--key-slot", strconv.Itoa(k.Slot)}
	if readOnly {
		args = append(args, "--read-only")
	}
	cmd := exec.Command(exe, append(args, "--", img, mnt)...)
	cmd.Env = append(os.Environ(), openChildEnv+"=1")
	cmd.ExtraFiles = []*os.File{keyR, readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		keyW.Close()
		return fmt.Errorf("failed to start the background process: %w", err)
	}
	_, err = keyW.Write(k.VolumeKey())
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

// childKey reads the volume key the parent passed on fd 3.
func childKey(e *image.Encrypted, slot int) (*image.Key, error) {
	f := os.NewFile(3, "key")
	if f == nil {
		return nil, errors.New("no key pipe")
	}
	defer f.Close()
	vk, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return nil, err
	}
	defer clear(vk)
	return e.KeyFromVolume(vk, slot)
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

func runClose(g *globalOptions, mnt string) error {
	mnt, err := filepath.Abs(mnt)
	if err != nil {
		return err
	}
	if stale, err := clearStale(mnt); err != nil {
		return err
	} else if stale {
		if !g.quiet {
			fmt.Fprintf(g.stderr, "cryptimg: cleared a stale mount at %s (its open process was gone)\n", mnt)
		}
		return nil
	}
	m, ok := findMount(mnt)
	if !ok {
		return fmt.Errorf("%s: %w: nothing is mounted there", mnt, errNotMounted)
	}
	if m.fstype != "fuse."+fuseName {
		return fmt.Errorf("%s: %w: it is a %s mount, not cryptimg's", mnt, errNotMounted, m.fstype)
	}
	// Flush through the mount: FSYNC reaches the view, which syncs the
	// image file, before the unmount.
	if ents, err := os.ReadDir(mnt); err == nil {
		for _, de := range ents {
			if f, err := os.Open(filepath.Join(mnt, de.Name())); err == nil {
				err = f.Sync()
				f.Close()
				if err != nil {
					return fmt.Errorf("failed to flush %s: %w", mnt, err)
				}
			}
		}
	}
	if err := unmount(mnt); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%s is busy (a loop device or open file uses it): %w", mnt, err)
		}
		return fmt.Errorf("failed to unmount %s: %w", mnt, err)
	}
	// Wait for the open process to finish flushing and exit.
	if pid, err := strconv.Atoi(strings.TrimPrefix(m.source, "cryptimg:")); err == nil && pid > 0 {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !isZombie(pid) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

var errNotMounted = errors.New("not a cryptimg mount")

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

type mountEntry struct{ point, fstype, source string }

// findMount looks mnt up in /proc/self/mountinfo.
func findMount(mnt string) (mountEntry, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountEntry{}, false
	}
	defer f.Close()
	var found mountEntry
	ok := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, s := range fields {
			if s == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if unescapeMount(fields[4]) == mnt {
			// The last entry for a path is the one on top.
			found, ok = mountEntry{mnt, fields[sep+1], fields[sep+2]}, true
		}
	}
	return found, ok
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
