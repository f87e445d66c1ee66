package main

import "testing"

// TestKernelPipelines boots the kernel once for the build-pipeline
// commands: images grown by resize open in dm-crypt and read back what was
// written after the old end, and what the kernel writes there is read by
// cryptimg (kernelResizeChecks).
func TestKernelPipelines(t *testing.T) {
	o := newOracle(t)
	kernelResizeChecks(t, o, t.TempDir())
	o.run()
}
