//go:build linux

package main

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cryptimg/cryptimg/image"
)

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
