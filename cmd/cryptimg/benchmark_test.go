package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchmarkCommand(t *testing.T) {
	r := mustRun(t, "benchmark", "--json", "--time", "2ms", "--key-size", "128,256", "--sizes", "16,512,1472")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	// 2 key sizes x 2 directions x (3 sizes + the batch row).
	if len(lines) != 16 {
		t.Fatalf("%d JSON lines, want 16:\n%s", len(lines), r.stdout)
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
		seen[row.Op+"/"+itoa(row.KeyBits)+"/"+itoa(row.Bytes)] = true
	}
	for _, k := range []string{"encrypt/128/16", "decrypt/256/1472", "encrypt/256/1048576"} {
		if !seen[k] {
			t.Errorf("no row for %s", k)
		}
	}
	r = mustRun(t, "benchmark", "--time", "1ms", "--key-size", "192", "--sizes", "4096")
	if !strings.Contains(r.stdout, "essiv(cbc(aes),sha256)") || !strings.Contains(r.stdout, " 192 decrypt      4096") {
		t.Errorf("table:\n%s", r.stdout)
	}
	if r := cryptimg(t, "", "benchmark", "--sizes", "100"); r.code != exitFailure {
		t.Errorf("a size that is not a multiple of 16: exit %d", r.code)
	}
}
