package image

import (
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// faultDisk is an in-memory set of files with power-loss semantics: a
// write or truncate becomes durable only when the file is synced. At a
// simulated crash every operation since the file's last sync is replayed in
// order, each 512-byte piece of a write (and each truncate) surviving or
// not at random, so unsynced writes may be lost, torn at sector
// granularity (atom), or reordered with each other. It can also fail the n-th
// read (EIO) or the n-th write (ENOSPC).
type faultDisk struct {
	mu    sync.Mutex // the operations may be called from several goroutines
	rng   *rand.Rand
	files map[string]*faultFile

	ops     int // mutating operations so far (WriteAt, Truncate, Sync, Create, Remove)
	crashAt int // crash before mutating operation crashAt; 0 = never
	crashed bool

	atom int64 // bytes a write keeps or loses together at a crash; 0 means 512

	reads, writes         int
	failReadAt, failWrite int // fail the n-th read/write; 0 = never
}

var errCrash = errors.New("simulated power loss")

func newFaultDisk(seed uint64) *faultDisk {
	return &faultDisk{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), files: map[string]*faultFile{}}
}

func (d *faultDisk) tick() error {
	if d.crashed {
		return errCrash
	}
	d.ops++
	if d.crashAt > 0 && d.ops >= d.crashAt {
		d.crashed = true
		return errCrash
	}
	return nil
}

type pendingOp struct {
	trunc bool
	off   int64 // write offset, or truncate size
	data  []byte
}

type faultFile struct {
	d       *faultDisk
	name    string
	durable []byte
	cur     []byte
	pending []pendingOp
}

func (d *faultDisk) add(name string, content []byte) *faultFile {
	f := &faultFile{d: d, name: name, durable: append([]byte(nil), content...), cur: append([]byte(nil), content...)}
	d.files[name] = f
	return f
}

// crash applies the power loss and clears the crash trigger.
func (d *faultDisk) crash() {
	q := []float64{0, 0.5, 1}[d.rng.IntN(3)]
	atom := d.atom
	if atom == 0 {
		atom = 512
	}
	for _, f := range d.files {
		s := f.durable
		for _, p := range f.pending {
			if p.trunc {
				if d.rng.Float64() < q {
					s = resize(s, p.off)
				}
				continue
			}
			for o := int64(0); o < int64(len(p.data)); {
				// The piece up to the next atom boundary.
				end := min(int64(len(p.data)), (p.off+o)/atom*atom+atom-p.off)
				if d.rng.Float64() < q {
					if need := p.off + end; int64(len(s)) < need {
						s = resize(s, need)
					}
					copy(s[p.off+o:], p.data[o:end])
				}
				o = end
			}
		}
		f.durable = s
		f.cur = append([]byte(nil), s...)
		f.pending = nil
	}
	d.crashed, d.crashAt = false, 0
}

func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if f.d.crashed {
		return 0, errCrash
	}
	f.d.reads++
	if f.d.failReadAt > 0 && f.d.reads == f.d.failReadAt {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: syscall.EIO}
	}
	if off >= int64(len(f.cur)) {
		return 0, io.EOF
	}
	n := copy(p, f.cur[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.d.tick(); err != nil {
		return 0, err
	}
	f.d.writes++
	if f.d.failWrite > 0 && f.d.writes == f.d.failWrite {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	if need := off + int64(len(p)); int64(len(f.cur)) < need {
		f.cur = resize(f.cur, need)
	}
	copy(f.cur[off:], p)
	f.pending = append(f.pending, pendingOp{off: off, data: append([]byte(nil), p...)})
	return len(p), nil
}

func (f *faultFile) Truncate(n int64) error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.d.tick(); err != nil {
		return err
	}
	f.cur = resize(f.cur, n)
	f.pending = append(f.pending, pendingOp{trunc: true, off: n})
	return nil
}

func (f *faultFile) Sync() error {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.d.tick(); err != nil {
		return err
	}
	for _, p := range f.pending {
		if p.trunc {
			f.durable = resize(f.durable, p.off)
			continue
		}
		if need := p.off + int64(len(p.data)); int64(len(f.durable)) < need {
			f.durable = resize(f.durable, need)
		}
		copy(f.durable[p.off:], p.data)
	}
	f.pending = nil
	return nil
}

func (f *faultFile) Stat() (fs.FileInfo, error) { return faultInfo{f}, nil }

type faultInfo struct{ f *faultFile }

func (i faultInfo) Name() string { return i.f.name }
func (i faultInfo) Size() int64 {
	i.f.d.mu.Lock()
	defer i.f.d.mu.Unlock()
	return int64(len(i.f.cur))
}
func (i faultInfo) Mode() fs.FileMode  { return 0o600 }
func (i faultInfo) ModTime() time.Time { return time.Time{} }
func (i faultInfo) IsDir() bool        { return false }
func (i faultInfo) Sys() any           { return nil }

// faultJournal is the JournalStore of the disk: creating and removing it
// are atomic and durable, as the sidecar's directory fsync makes them.
type faultJournal struct {
	d    *faultDisk
	name string
}

func (j faultJournal) Name() string { return j.name }

func (j faultJournal) Open() (File, error) {
	j.d.mu.Lock()
	defer j.d.mu.Unlock()
	if j.d.crashed {
		return nil, errCrash
	}
	f, ok := j.d.files[j.name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: j.name, Err: fs.ErrNotExist}
	}
	return f, nil
}

func (j faultJournal) Create() (File, error) {
	j.d.mu.Lock()
	defer j.d.mu.Unlock()
	if err := j.d.tick(); err != nil {
		return nil, err
	}
	if _, ok := j.d.files[j.name]; ok {
		return nil, &fs.PathError{Op: "create", Path: j.name, Err: fs.ErrExist}
	}
	return j.d.add(j.name, nil), nil
}

func (j faultJournal) Remove() error {
	j.d.mu.Lock()
	defer j.d.mu.Unlock()
	if err := j.d.tick(); err != nil {
		return err
	}
	delete(j.d.files, j.name)
	return nil
}
