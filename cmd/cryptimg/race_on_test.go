//go:build race

package main

// raceEnabled: under the race detector the long crash and concurrency
// tests run fewer rounds; the full counts run in the normal test run.
const raceEnabled = true
