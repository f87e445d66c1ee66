package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchmarkCommand(t *testing.T) {
	r := mustRun(t, "benchmark", "--json", "--time", "2ms", "--key-size", "128,256", "--sizes", "16,512,1472")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	// ESSIV: 2 key sizes x 2 directions x (3 sizes + 2 batch rows); XTS:
	// 2 key sizes x 2 directions x (2 sizes + 2 batch rows); integrity:
	// 3 modes x 2 sector sizes x 3 operations.
	if len(lines) != 20+16+18 {
		t.Fatalf("%d JSON lines, want 54:\n%s", len(lines), r.stdout)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var row benchmarkRow
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		if row.OpsPerSec <= 0 || row.StdOpsPerSec <= 0 || row.MBPerSec <= 0 || row.Kernel == "" {
			t.Errorf("empty measurement: %+v", row)
		}
		if got := row.OpsPerSec / row.StdOpsPerSec; got < row.SpeedupStdlib*0.999 || got > row.SpeedupStdlib*1.001 {
			t.Errorf("speedup %v does not match the rates %+v", row.SpeedupStdlib, row)
		}
		if (row.Cipher == "aes-xts-plain64" && row.Batch > 1) != (row.EssivRatio > 0) {
			t.Errorf("ESSIV ratio only and always on XTS batch rows: %+v", row)
		}
		if strings.Contains(row.Cipher, " + ") {
			// Integrity rows: 1 MiB batches of their sector size, against
			// crypto/sha256 over the same bytes.
			if row.Bytes != 1<<20 || row.SectorSize*row.Batch != row.Bytes || (row.SectorSize != 512 && row.SectorSize != 4096) {
				t.Errorf("integrity row shape: %+v", row)
			}
			seen[row.Cipher+"/"+row.Op+"/"+itoa(row.SectorSize)] = true
			continue
		}
		if row.SectorSize != 0 {
			t.Errorf("sector_size on a cipher row: %+v", row)
		}
		seen[row.Cipher+"/"+row.Op+"/"+itoa(row.KeyBits)+"/"+itoa(row.Bytes)] = true
	}
	for _, mode := range []string{"aes-cbc-essiv:sha256 + hmac(sha256)", "aes-xts-plain64 + hmac(sha256)", "aes-gcm-random + aead"} {
		for _, op := range []string{"encrypt", "decrypt", "verify"} {
			for _, ss := range []string{"512", "4096"} {
				if !seen[mode+"/"+op+"/"+ss] {
					t.Errorf("no integrity row for %s %s %s", mode, op, ss)
				}
			}
		}
	}
	for _, k := range []string{"aes-cbc-essiv:sha256/encrypt/128/16", "aes-cbc-essiv:sha256/decrypt/256/1472",
		"aes-cbc-essiv:sha256/encrypt/256/1048576", "aes-xts-plain64/decrypt/512/4096", "aes-xts-plain64/encrypt/256/1048576"} {
		if !seen[k] {
			t.Errorf("no row for %s", k)
		}
	}
	r = mustRun(t, "benchmark", "--time", "1ms", "--key-size", "192", "--sizes", "4096", "--cipher", "essiv")
	if !strings.Contains(r.stdout, "essiv(cbc(aes),sha256)") || !strings.Contains(r.stdout, " 192 decrypt      4096") || strings.Contains(r.stdout, "xts") {
		t.Errorf("table:\n%s", r.stdout)
	}
	r = mustRun(t, "benchmark", "--time", "1ms", "--cipher", "xts")
	if !strings.Contains(r.stdout, "xts(aes)") || !strings.Contains(r.stdout, " 512 decrypt   1048576    256") || strings.Contains(r.stdout, "essiv(cbc") {
		t.Errorf("xts table:\n%s", r.stdout)
	}
	r = mustRun(t, "benchmark", "--time", "1ms", "--cipher", "integrity")
	xtsVerify := false
	for l := range strings.SplitSeq(r.stdout, "\n") {
		f := strings.Fields(l)
		xtsVerify = xtsVerify || len(f) == 9 && strings.Join(f[:6], " ") == "aes-xts-plain64 + hmac(sha256) 512 verify 4096"
	}
	if !strings.Contains(r.stdout, "integrity modes, HMAC-SHA256 by ") || !xtsVerify ||
		strings.Contains(r.stdout, "xts(aes)") || strings.Contains(r.stdout, "essiv(cbc") {
		t.Errorf("integrity table:\n%s", r.stdout)
	}
	if r := cryptimg(t, "", "benchmark", "--cipher", "twofish"); r.code != exitFailure {
		t.Errorf("unknown --cipher: exit %d", r.code)
	}
	if r := cryptimg(t, "", "benchmark", "--sizes", "100"); r.code != exitFailure {
		t.Errorf("a size that is not a multiple of 16: exit %d", r.code)
	}
}
