//go:build !race

package sectors

const raceEnabled = false
