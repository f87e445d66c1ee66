// Package secmem keeps secrets (volume keys, passphrases, key schedules)
// outside the Go heap, in memory of their own that the garbage collector
// never copies: on Linux each allocation is an anonymous mapping, locked
// into RAM where the system allows it (mlock) and left out of core dumps
// (MADV_DONTDUMP), and Free overwrites it before unmapping it. Harden
// makes the whole process non-dumpable.
//
// This follows what cryptsetup does since 2.6.0: it no longer locks the
// whole process (mlockall, which exceeded non-root lock limits as the
// libraries grew), but locks each buffer that holds key material
// (crypt_safe_alloc in lib/utils_safe_memory.c), and quietly uses the
// buffer unlocked when the lock is refused. A Go program cannot lock its
// heap at all: with mlockall(MCL_FUTURE) under a limit, the runtime's next
// heap mapping fails and the process dies.
//
// Elsewhere (macOS, Windows, other Unixes) Alloc is make and Free is
// clear: nothing is locked or kept out of dumps.
//
// It is an internal layer of cryptimg, not a stable API.
package secmem

// Alloc returns n zeroed bytes for a secret. On Linux they live in memory
// of their own, outside the Go heap; hand them back with Free, and do not
// use them afterwards (Free unmaps them). The memory holds no Go pointers:
// store only bytes, or values without pointers, in it.
func Alloc(n int) []byte { return alloc(n) }

// Clone returns a copy of b in memory from Alloc.
func Clone(b []byte) []byte {
	c := Alloc(len(b))
	copy(c, b)
	return c
}

// Free overwrites b with zeros and, if Alloc made it (b starts where an
// allocation starts), returns its memory; the whole allocation is wiped,
// whatever len(b). Any other slice is only cleared, so Free suits every
// secret, wherever it came from. Free(nil) does nothing.
func Free(b []byte) { free(b) }

// Locked reports whether the memory of b, which Alloc made, is locked
// into RAM. It is false where locking is refused (see Harden) and on
// systems other than Linux.
func Locked(b []byte) bool { return locked(b) }

// Harden prepares the process to hold secrets: it makes the process
// non-dumpable (no core dump, no ptrace attach and no reading of its
// memory through /proc by other processes of the same user) and raises the
// soft limit on locked memory to the hard one, so that Alloc can lock as
// much as the system allows. Call it first thing in main; on systems other
// than Linux it does nothing.
func Harden() error { return harden() }

// Owns reports whether b starts a live allocation of Alloc, in memory of
// its own; always false on systems other than Linux.
func Owns(b []byte) bool { return owns(b) }
