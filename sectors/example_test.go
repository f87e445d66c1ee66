package sectors_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cryptimg/cryptimg/sectors"
)

// buffer is an in-memory io.WriterAt.
type buffer []byte

func (b buffer) WriteAt(p []byte, off int64) (int, error) { return copy(b[off:], p), nil }

func ExampleRun() {
	// A toy transform: add the sector number to every byte of the sector.
	addSector := func(dst, src []byte, firstSector uint64) error {
		for i := range src {
			dst[i] = src[i] + byte(firstSector+uint64(i/sectors.UnitSize))
		}
		return nil
	}
	src := bytes.NewReader(make([]byte, 4096)) // 8 zero sectors
	dst := make(buffer, 4096+1024)
	// Sectors 2..7 of src go to dst at 1024, numbered from 100.
	extents := []sectors.Extent{{SrcOffset: 1024, DstOffset: 1024, Length: 3072, Sector: 100}}
	o := sectors.Options{Jobs: 2, ChunkSize: 1024, Progress: func(done int64) { fmt.Println("done", done) }}
	if err := sectors.Run(context.Background(), dst, src, extents, addSector, o); err != nil {
		fmt.Println(err)
		return
	}
	for off := 0; off < len(dst); off += 512 {
		fmt.Print(dst[off], " ")
	}
	fmt.Println()
	// Output:
	// done 1024
	// done 2048
	// done 3072
	// 0 0 100 101 102 103 104 105 0 0
}
