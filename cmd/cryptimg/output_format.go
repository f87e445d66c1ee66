package main

import (
	"slices"
	"strings"

	"github.com/cryptimg/cryptimg/image"
)

// outputFormats are the --output-format values.
var outputFormats = []string{string(image.Raw), string(image.Qcow2)}

// parseFormat checks an --output-format value; "" means the input's.
func parseFormat(s string) (image.Format, error) {
	if s == "" || slices.Contains(outputFormats, s) {
		return image.Format(s), nil
	}
	return "", usagef("unknown --output-format %q: use %s", s, strings.Join(outputFormats, " or "))
}

func formatOr(f, def image.Format) image.Format {
	if f == "" {
		return def
	}
	return f
}
