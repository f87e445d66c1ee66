package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressMode selects how long operations report progress on stderr.
type progressMode string

const (
	progressAuto  progressMode = "auto"  // a bar on a terminal, else nothing
	progressBar   progressMode = "bar"   // always a bar
	progressPlain progressMode = "plain" // a text line every few seconds, for logs
	progressJSON  progressMode = "json"  // JSON Lines status messages and a summary
	progressNone  progressMode = "none"  // nothing
)

var progressModes = []progressMode{progressAuto, progressBar, progressPlain, progressJSON, progressNone}

// Intervals between progress lines.
const (
	progressPlainInterval = 2 * time.Second
	progressJSONInterval  = 250 * time.Millisecond
)

// parseProgressMode parses the value of --progress.
func parseProgressMode(s string) (progressMode, error) {
	names := make([]string, len(progressModes))
	for i, m := range progressModes {
		if s == string(m) {
			return m, nil
		}
		names[i] = string(m)
	}
	return "", fmt.Errorf("invalid progress mode %q (valid: %s)", s, strings.Join(names, ", "))
}

// progressReporter shows the progress of one operation. Update takes the
// cumulative bytes done; Finish ends the display (a final summary for json
// and plain, a cleared bar for bar) and reports the last Update as final.
// The methods must not be called concurrently; the sectors Progress
// callback, which runs on one goroutine, can call Update directly.
type progressReporter interface {
	Update(done int64)
	Finish()
}

// newProgress returns a reporter for the operation op ("encrypt",
// "decrypt", ...) of total bytes, writing to stderr. quiet forces none; auto
// shows a bar only when stderr is a terminal.
func newProgress(mode progressMode, quiet bool, stderr io.Writer, stderrIsTerminal bool, op string, total int64) progressReporter {
	return newProgressClock(mode, quiet, stderr, stderrIsTerminal, op, total, time.Now)
}

// newProgressClock is newProgress with a clock, for tests.
func newProgressClock(mode progressMode, quiet bool, stderr io.Writer, stderrIsTerminal bool, op string, total int64, now func() time.Time) progressReporter {
	if quiet {
		mode = progressNone
	}
	if mode == progressAuto {
		mode = progressNone
		if stderrIsTerminal {
			mode = progressBar
		}
	}
	st := progressStats{op: op, total: total, now: now, start: now()}
	switch mode {
	case progressBar:
		return newProgressBarReporter(stderr, op, total)
	case progressPlain:
		return &progressPlainReporter{progressStats: st, w: stderr}
	case progressJSON:
		return &progressJSONReporter{progressStats: st, w: stderr}
	default:
		return progressNoop{}
	}
}

// progressStats holds what the text reporters compute rates from.
type progressStats struct {
	op      string
	total   int64
	done    int64
	now     func() time.Time
	start   time.Time
	emitted time.Time // last line written; zero before the first
}

// elapsed returns the time since the start, never zero, so rates stay finite.
func (s *progressStats) elapsed(t time.Time) time.Duration {
	return max(t.Sub(s.start), time.Microsecond)
}

// rate returns the average bytes per second since the start.
func (s *progressStats) rate(t time.Time) float64 {
	return float64(s.done) / s.elapsed(t).Seconds()
}

// fraction returns the fraction done, 0 to 1.
func (s *progressStats) fraction() float64 {
	if s.total < 0 {
		return 0 // a stream: the total is not known
	}
	if s.total == 0 {
		return 1
	}
	return min(float64(s.done)/float64(s.total), 1)
}

// due reports whether a line is due at t, at most one per interval, and
// records it as written if so.
func (s *progressStats) due(t time.Time, interval time.Duration, first bool) bool {
	if s.emitted.IsZero() {
		if !first && t.Sub(s.start) < interval {
			return false
		}
	} else if t.Sub(s.emitted) < interval {
		return false
	}
	s.emitted = t
	return true
}

type progressNoop struct{}

func (progressNoop) Update(int64) {}
func (progressNoop) Finish()      {}

// progressJSONReporter writes JSON Lines: a "status" message at most every
// progressJSONInterval (the first at the first Update) and a "summary" at
// Finish, in the shape of restic's --json messages.
type progressJSONReporter struct {
	progressStats
	w io.Writer
}

type progressJSONMessage struct {
	MessageType    string  `json:"message_type"`
	Op             string  `json:"op"`
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	PercentDone    float64 `json:"percent_done"`
	BytesPerSecond int64   `json:"bytes_per_second"`
	SecondsElapsed float64 `json:"seconds_elapsed"`
}

func (r *progressJSONReporter) Update(done int64) {
	r.done = done
	if t := r.now(); r.due(t, progressJSONInterval, true) {
		r.write("status", t)
	}
}

func (r *progressJSONReporter) Finish() {
	r.write("summary", r.now())
}

func (r *progressJSONReporter) write(kind string, t time.Time) {
	b, err := json.Marshal(progressJSONMessage{
		MessageType:    kind,
		Op:             r.op,
		BytesDone:      r.done,
		BytesTotal:     r.total,
		PercentDone:    r.fraction(),
		BytesPerSecond: int64(r.rate(t)),
		SecondsElapsed: r.elapsed(t).Seconds(),
	})
	if err != nil {
		panic("cryptimg: internal error: " + err.Error())
	}
	// One Write per line, so that lines from other writers do not cut in.
	r.w.Write(append(b, '\n'))
}

// progressPlainReporter writes a line like
// "cryptimg: encrypt: 512.0 MiB / 1.0 GiB (50%), 1.2 GiB/s, eta 1s"
// every progressPlainInterval, and a last one at Finish.
type progressPlainReporter struct {
	progressStats
	w io.Writer
}

func (r *progressPlainReporter) Update(done int64) {
	r.done = done
	if t := r.now(); r.due(t, progressPlainInterval, false) {
		r.write(t)
	}
}

func (r *progressPlainReporter) Finish() {
	r.write(r.now())
}

func (r *progressPlainReporter) write(t time.Time) {
	rate := r.rate(t)
	eta := "?"
	if rate > 0 {
		remaining := float64(max(r.total-r.done, 0)) / rate
		eta = time.Duration(remaining * float64(time.Second)).Round(time.Second).String()
	}
	if r.total < 0 {
		fmt.Fprintf(r.w, "cryptimg: %s: %s, %s/s\n", r.op, progressBytes(float64(r.done)), progressBytes(rate))
		return
	}
	fmt.Fprintf(r.w, "cryptimg: %s: %s / %s (%d%%), %s/s, eta %s\n", r.op,
		progressBytes(float64(r.done)), progressBytes(float64(r.total)), int(r.fraction()*100),
		progressBytes(rate), eta)
}

// progressBytes formats n bytes with IEC units and one decimal: "512.0 MiB".
func progressBytes(n float64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", int64(n))
	}
	const units = "KMGTPE"
	i := -1
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", n, units[i])
}

// progressBarReporter draws a terminal bar with bytes, rate and ETA.
type progressBarReporter struct {
	bar *progressbar.ProgressBar
	w   io.Writer
}

func newProgressBarReporter(w io.Writer, op string, total int64) *progressBarReporter {
	return &progressBarReporter{w: w, bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("cryptimg: "+op),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionClearOnFinish(),
	)}
}

func (r *progressBarReporter) Update(done int64) {
	// The bar only fails when its writer does; a lost frame is harmless.
	_ = r.bar.Set64(done)
}

// Finish clears a complete bar (the command prints its own summary line) and
// leaves an incomplete one as it stands, ending its line so that an error
// message starts on a line of its own.
func (r *progressBarReporter) Finish() {
	if r.bar.State().CurrentNum < r.bar.GetMax64() {
		_ = r.bar.Exit()
		_, _ = io.WriteString(r.w, "\n")
		return
	}
	_ = r.bar.Finish()
}
