package cipher

import "github.com/cryptimg/cryptimg/essiv"

// aes-cbc-essiv:sha256, in assembly (package essiv).
func init() {
	register(&Mode{Name: "aes", Mode: "cbc-essiv:sha256", KeyBytes: []int{16, 24, 32}, DefaultKeyBytes: 32,
		new: func(key []byte) (kernel, error) { return essiv.NewCipher(key) }})
}
