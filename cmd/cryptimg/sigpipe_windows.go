//go:build windows

package main

// ignoreSIGPIPE: Windows has no SIGPIPE; a closed pipe is an error already.
func ignoreSIGPIPE() {}
