//go:build race

package cipher

// raceEnabled: the race detector makes sync.Pool drop objects at random,
// so allocation counts mean nothing.
const raceEnabled = true
