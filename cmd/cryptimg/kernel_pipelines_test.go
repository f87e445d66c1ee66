package main

import "testing"

// TestKernelPipelines boots the kernel once for the build-pipeline
// commands: images grown by resize open in dm-crypt and read back what was
// written after the old end, and what the kernel writes there is read by
// cryptimg (kernelResizeChecks); partition 2 of an MBR disk, encrypted by
// --partition (LUKS1, LUKS2, and through a qcow2 output), opens and reads
// its old data while partitions 1 and 3 are unchanged (kernelMBRChecks);
// images made by create and written on the host, and clones with new or
// derived keys, open and read back (kernelCreateCloneChecks); veritysetup
// open maps data through cryptimg's verity trees and fails the read of a
// changed block (kernelVerityChecks), also from the two partitions verity
// format --partition made in a GPT disk (kernelVerityPartitionChecks).
func TestKernelPipelines(t *testing.T) {
	o := newOracle(t)
	kernelResizeChecks(t, o, t.TempDir())
	kernelMBRChecks(t, o, t.TempDir())
	kernelCreateCloneChecks(t, o, t.TempDir())
	kernelVerityChecks(t, o, t.TempDir())
	kernelVerityPartitionChecks(t, o, t.TempDir())
	o.run()
}
