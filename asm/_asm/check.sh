#!/bin/sh
# Regenerates the amd64 kernels and fails if the checked-in files differ.
set -eu
cd "$(dirname "$0")"
go generate ./...
git diff --exit-code -- ../kernels_amd64.s ../kernels_amd64_stubs.go
echo "asm/_asm: generated kernels are up to date"
