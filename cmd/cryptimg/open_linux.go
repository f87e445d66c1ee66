//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/filelock"
)

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
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	if o.verity.partition != 0 && !o.verity.partitionMode() {
		return usagef("--partition N goes with --root-hash alone (no --verity-hash or --verity-hash-offset)")
	}
	if o.verity.enabled() {
		// dm-verity devices are read-only; check the flags before any
		// secret is asked for.
		if _, err := o.verity.root(); err != nil {
			return err
		}
		if o.verity.partitionMode() && o.verity.partition <= 0 {
			return usagef("--root-hash without --verity-hash needs --partition N: the data partition of the GPT disk, whose tree is in its verity partition")
		}
		o.readOnly = true
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
	// The image is locked for as long as the mount lives: shared when
	// read-only, exclusive when read-write. The background child inherits
	// the locked files (fds 5 and 6) and holds them after its parent exits.
	var src, hf *os.File
	if child {
		src, err = inheritedFile(openChildImageFD, img)
	} else {
		src, err = openImageFile(img, o.readOnly)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if g.header != "" {
		if child {
			hf, err = inheritedFile(openChildHeaderFD, g.header)
		} else {
			// The header is only read, whatever the mount does.
			hf, err = openForRead(g.header)
		}
		if err != nil {
			return err
		}
		defer hf.Close()
	}
	if err := checkNotPending(src, img); err != nil {
		return err
	}
	e, err := openDataWith(src, hf, img)
	plain := false
	if err != nil {
		if !o.verity.enabled() || hf != nil {
			return err
		}
		// With verity flags, a plain raw image is mounted as it is.
		if plain, err = verityPlainImage(src, img, err); !plain {
			return err
		}
	}
	var k *image.Key
	switch {
	case plain:
	case child:
		if k, err = childKey(e, o.keySlot); err != nil {
			return fmt.Errorf("%s: %w", img, err)
		}
	default:
		if k, err = unlockImage(g, e, o.key, img, passPrompt(img), o.keySlot); err != nil {
			return err
		}
	}
	if k != nil {
		defer k.Clear()
	}
	if o.background && !child {
		return startBackground(g, img, mnt, o, k, src, hf)
	}
	v, err := openMountView(o, e, k, src, img)
	if err != nil {
		return err
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

// openMountView opens the view to mount: the plaintext of e (nil for a
// plain image, with verity flags), checked against the dm-verity tree with
// verity flags.
func openMountView(o openOptions, e *image.Encrypted, k *image.Key, src *os.File, img string) (image.View, error) {
	if o.verity.enabled() {
		if k == nil {
			e = nil // a plain image
		}
		if o.verity.partitionMode() {
			return o.verity.partitionView(e, k, src, img)
		}
		return o.verity.view(e, k, src, img)
	}
	v, err := e.View(src, k, o.readOnly)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", img, err)
	}
	return v, nil
}

// openImageFile opens the image to mount under the lock its mount needs:
// exclusive to write, shared to read only.
func openImageFile(img string, readOnly bool) (*os.File, error) {
	flag, m := os.O_RDWR, filelock.Exclusive
	if readOnly {
		flag, m = os.O_RDONLY, filelock.Shared
	}
	f, err := os.OpenFile(img, flag, 0)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f, img, m); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
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
