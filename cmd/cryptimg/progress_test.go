package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// progressTestClock is a manual clock for the progress reporters.
type progressTestClock struct{ t time.Time }

func (c *progressTestClock) now() time.Time          { return c.t }
func (c *progressTestClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newProgressTestClock() *progressTestClock {
	return &progressTestClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestParseProgressMode(t *testing.T) {
	for _, s := range []string{"auto", "bar", "plain", "json", "none"} {
		m, err := parseProgressMode(s)
		if err != nil || string(m) != s {
			t.Errorf("parseProgressMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "JSON", "fancy"} {
		_, err := parseProgressMode(s)
		if err == nil || !strings.Contains(err.Error(), "(valid: auto, bar, plain, json, none)") {
			t.Errorf("parseProgressMode(%q) error = %v, want one listing the valid modes", s, err)
		}
	}
}

// progressLine is a decoded JSON progress line; decoding rejects unknown
// fields, and required fields are checked separately.
type progressLine struct {
	MessageType    string  `json:"message_type"`
	Op             string  `json:"op"`
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	PercentDone    float64 `json:"percent_done"`
	BytesPerSecond int64   `json:"bytes_per_second"`
	SecondsElapsed float64 `json:"seconds_elapsed"`
}

func parseProgressLines(t *testing.T, out string) []progressLine {
	t.Helper()
	var lines []progressLine
	for l := range strings.Lines(out) {
		var keys map[string]any
		if err := json.Unmarshal([]byte(l), &keys); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		for _, k := range []string{"message_type", "op", "bytes_done", "bytes_total", "percent_done", "bytes_per_second", "seconds_elapsed"} {
			if _, ok := keys[k]; !ok {
				t.Errorf("line %q lacks %q", l, k)
			}
		}
		d := json.NewDecoder(strings.NewReader(l))
		d.DisallowUnknownFields()
		var p progressLine
		if err := d.Decode(&p); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, p)
	}
	return lines
}

func TestProgressJSON(t *testing.T) {
	const total = 1 << 30
	clock := newProgressTestClock()
	var out bytes.Buffer
	r := newProgressClock(progressJSON, false, &out, false, "encrypt", total, clock.now)

	// A burst of updates within 100 ms: at most 2 lines.
	var done int64
	for range 1000 {
		clock.advance(100 * time.Microsecond)
		done += 4096
		r.Update(done)
	}
	if n := strings.Count(out.String(), "\n"); n < 1 || n > 2 {
		t.Fatalf("%d lines for 1000 updates in 100 ms, want 1 or 2:\n%s", n, out.String())
	}
	// Then 10 s of updates every 10 ms: about 4 lines per second.
	before := strings.Count(out.String(), "\n")
	for range 1000 {
		clock.advance(10 * time.Millisecond)
		done += 2 << 20
		r.Update(min(done, total))
	}
	if n := strings.Count(out.String(), "\n") - before; n < 38 || n > 41 {
		t.Errorf("%d lines in 10 s, want about 40 (4 per second)", n)
	}
	r.Finish()

	lines := parseProgressLines(t, out.String())
	start := newProgressTestClock().t
	var prev progressLine
	for i, l := range lines {
		last := i == len(lines)-1
		wantType := "status"
		if last {
			wantType = "summary"
		}
		if l.MessageType != wantType || l.Op != "encrypt" || l.BytesTotal != total {
			t.Errorf("line %d: %+v, want type %s, op encrypt, total %d", i, l, wantType, total)
		}
		if l.BytesDone < prev.BytesDone || l.SecondsElapsed < prev.SecondsElapsed || l.PercentDone < prev.PercentDone {
			t.Errorf("line %d goes backwards: %+v after %+v", i, l, prev)
		}
		if want := float64(l.BytesDone) / total; math.Abs(l.PercentDone-want) > 1e-9 {
			t.Errorf("line %d: percent_done %v, want %v", i, l.PercentDone, want)
		}
		if want := float64(l.BytesDone) / l.SecondsElapsed; math.Abs(float64(l.BytesPerSecond)-want) > 1 {
			t.Errorf("line %d: bytes_per_second %d, want %.0f", i, l.BytesPerSecond, want)
		}
		prev = l
	}
	final := lines[len(lines)-1]
	wantElapsed := clock.t.Sub(start).Seconds()
	if final.BytesDone != total || final.PercentDone != 1 || math.Abs(final.SecondsElapsed-wantElapsed) > 1e-6 {
		t.Errorf("summary %+v, want all %d bytes, percent 1, %.1f s", final, total, wantElapsed)
	}
}

// TestProgressJSONRealClock checks the rate limit with the real clock: a
// fast burst of updates gives at most 2 status lines, then the summary.
func TestProgressJSONRealClock(t *testing.T) {
	var out bytes.Buffer
	r := newProgress(progressJSON, false, &out, false, "decrypt", 1<<40)
	start := time.Now()
	for i := range int64(100000) {
		r.Update(i << 20)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Skipf("100000 updates took %v; the machine is too busy to test a 100 ms burst", d)
	}
	r.Finish()
	lines := parseProgressLines(t, out.String())
	if len(lines) < 2 || len(lines) > 3 || lines[len(lines)-1].MessageType != "summary" {
		t.Errorf("got %d lines, want 1-2 status and a summary:\n%s", len(lines), out.String())
	}
	if lines[len(lines)-1].BytesDone != 99999<<20 {
		t.Errorf("summary bytes_done %d, want %d", lines[len(lines)-1].BytesDone, int64(99999<<20))
	}
}

func TestProgressPlain(t *testing.T) {
	const (
		M     = 1 << 20
		total = 1 << 30
	)
	clock := newProgressTestClock()
	var out bytes.Buffer
	r := newProgressClock(progressPlain, false, &out, false, "encrypt", total, clock.now)
	steps := []struct {
		at   time.Duration // since start
		done int64
		want string // line printed, if any
	}{
		{500 * time.Millisecond, 64 * M, ""},
		{1900 * time.Millisecond, 200 * M, ""},
		{2 * time.Second, 512 * M, "cryptimg: encrypt: 512.0 MiB / 1.0 GiB (50%), 256.0 MiB/s, eta 2s\n"},
		{3 * time.Second, 600 * M, ""},
		{4 * time.Second, 1000 * M, "cryptimg: encrypt: 1000.0 MiB / 1.0 GiB (97%), 250.0 MiB/s, eta 0s\n"},
		{5 * time.Second, 1024 * M, ""},
	}
	start := clock.t
	for _, s := range steps {
		clock.t = start.Add(s.at)
		out.Reset()
		r.Update(s.done)
		if out.String() != s.want {
			t.Errorf("at %v, done %d: printed %q, want %q", s.at, s.done, out.String(), s.want)
		}
	}
	out.Reset()
	r.Finish()
	if want := "cryptimg: encrypt: 1.0 GiB / 1.0 GiB (100%), 204.8 MiB/s, eta 0s\n"; out.String() != want {
		t.Errorf("Finish printed %q, want %q", out.String(), want)
	}

	// Nothing done yet: no rate, no ETA.
	out.Reset()
	r = newProgressClock(progressPlain, false, &out, false, "decrypt", 3*1024, clock.now)
	clock.advance(3 * time.Second)
	r.Update(0)
	if want := "cryptimg: decrypt: 0 B / 3.0 KiB (0%), 0 B/s, eta ?\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

func TestProgressSilent(t *testing.T) {
	cases := []struct {
		name     string
		mode     progressMode
		quiet    bool
		terminal bool
	}{
		{"none", progressNone, false, true},
		{"auto without terminal", progressAuto, false, false},
		{"quiet auto", progressAuto, true, true},
		{"quiet bar", progressBar, true, true},
		{"quiet plain", progressPlain, true, false},
		{"quiet json", progressJSON, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newProgressTestClock()
			var out bytes.Buffer
			r := newProgressClock(tc.mode, tc.quiet, &out, tc.terminal, "encrypt", 100<<20, clock.now)
			for i := range int64(100) {
				clock.advance(time.Second)
				r.Update(i << 20)
			}
			r.Finish()
			if out.Len() != 0 {
				t.Errorf("printed %q, want nothing", out.String())
			}
		})
	}
}

func TestProgressBar(t *testing.T) {
	for _, mode := range []progressMode{progressBar, progressAuto} {
		var out bytes.Buffer
		r := newProgress(mode, false, &out, true, "decrypt", 64<<20)
		if _, ok := r.(*progressBarReporter); !ok {
			t.Fatalf("mode %s on a terminal: %T, want a bar", mode, r)
		}
		r.Update(8 << 20)
		time.Sleep(120 * time.Millisecond) // past the bar's throttle
		r.Update(16 << 20)
		if s := out.String(); !strings.Contains(s, "cryptimg: decrypt") || !strings.Contains(s, "16/64 MiB, ") || !strings.Contains(s, "MiB/s") {
			t.Errorf("mode %s: bar output %q lacks the description, sizes or rate", mode, s)
		}
		// An incomplete bar ends its line at Finish.
		r.Finish()
		if !strings.HasSuffix(out.String(), "\n") {
			t.Errorf("incomplete bar not ended with a newline: %q", out.String())
		}
	}
}

func TestProgressBytes(t *testing.T) {
	cases := []struct {
		n    float64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{512 << 20, "512.0 MiB"},
		{1.5 * (1 << 30), "1.5 GiB"},
		{1 << 60, "1.0 EiB"},
	}
	for _, c := range cases {
		if got := progressBytes(c.n); got != c.want {
			t.Errorf("progressBytes(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}
