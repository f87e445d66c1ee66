//go:build race

package sectors

// raceEnabled: the race detector allocates on its own, so a run may
// see collections it did not cause.
const raceEnabled = true
