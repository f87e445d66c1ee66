// Command cryptimg encrypts and decrypts raw and qcow2 disk image files
// behind a LUKS1 or LUKS2 header, without root, device-mapper or kernel
// support. Its images open with cryptsetup, dm-crypt and qemu, and it opens
// theirs.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Exit codes follow cryptsetup's, which scripts already test for. Unknown
// codes must be treated as failure.
const (
	exitOK          = 0
	exitFailure     = 1 // usage or other error
	exitNoKey       = 2 // no key slot matched the key
	exitNoMemory    = 3
	exitBadImage    = 4 // not LUKS/qcow2, corrupt header, truncated payload
	exitBusy        = 5
	exitInterrupted = 130
)

const exitStatusHelp = `
EXIT STATUS
  0    success
  1    usage error or other failure
  2    no key slot matched the key
  4    not an encrypted image, corrupt header or truncated payload
  5    busy: the image is locked, or has an unfinished reencrypt or in-place operation
  130  interrupted (SIGINT or SIGTERM)
`

// globalOptions are the flags every command shares and the process's
// streams, so tests can run commands in-process.
type globalOptions struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// stdinFile and stderrFile are the real files behind stdin and
	// stderr, when they are files; used for terminal detection.
	stdinFile  *os.File
	stderrFile *os.File

	quiet    bool
	batch    bool // --batch-mode: no confirmations, no passphrase verification
	slowKDF  bool // --allow-slow-kdf: unlock whatever the key derivation costs
	nullOK   bool // --allow-null-cipher: use a LUKS2 keyslot or segment that is not encrypted
	progress string
	jobs     int
	chunk    int    // --chunk-size in bytes; 0 = the pipeline's default
	header   string // --header: a detached LUKS header file

	cleanup *cleanupList
	// kdf is the time spent on key derivation so far (unlocking, making a
	// key slot), which the summaries report apart from the data's.
	kdf time.Duration
	// newlineKeys names the passphrase key files read that end in a
	// newline, for the hint when no key slot matches (keyHint).
	newlineKeys []string
	// jsonReported is set by a command whose --json result, already on
	// stdout, carries its failure (verify's report of bad sectors): the
	// error object is then not printed as a second object.
	jsonReported bool
	// graceful, once set by a command (open in the foreground), makes a
	// signal wait for the command to unwind instead of forcing an exit
	// after a second; a second signal still forces it.
	graceful atomic.Bool
	// cmdCtx is the running command's context (cancelled by a signal),
	// for library calls made below the command's run function.
	cmdCtx context.Context
}

// ctx is the running command's context.
func (g *globalOptions) ctx() context.Context {
	if g.cmdCtx == nil {
		return context.Background()
	}
	return g.cmdCtx
}

// validate checks the global flags before a command does anything.
func (g *globalOptions) validate() error {
	if _, err := parseProgressMode(g.progress); err != nil {
		return usagef("--progress: %v", err)
	}
	if g.jobs < 0 || g.jobs > 1024 {
		return usagef("--jobs must be from 1 to 1024 (or 0, one per CPU), not %d", g.jobs)
	}
	if c := g.chunk; c != 0 && (c%image.SectorSize != 0 || c < 64<<10 || c > 64<<20) {
		return usagef("--chunk-size must be a multiple of %d from 65536 to 67108864 bytes, not %d", image.SectorSize, c)
	}
	return nil
}

// pipeline is the pipeline configuration of the global flags, reporting
// progress to p.
func (g *globalOptions) pipeline(p *opProgress) image.Pipeline {
	jobs := g.jobs
	if jobs == 0 {
		jobs = defaultJobs()
	}
	return image.Pipeline{Jobs: jobs, ChunkSize: g.chunk, Progress: p.update}
}

func (g *globalOptions) stderrIsTerminal() bool {
	return g.stderrFile != nil && term.IsTerminal(int(g.stderrFile.Fd()))
}

func (g *globalOptions) stdinIsTerminal() bool {
	return g.stdinFile != nil && term.IsTerminal(int(g.stdinFile.Fd()))
}

func newRootCommand(g *globalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:   "cryptimg",
		Short: "Encrypt and decrypt raw and qcow2 disk images behind LUKS1 or LUKS2 headers",
		Long: `cryptimg encrypts and decrypts raw and qcow2 disk image files behind a LUKS1
or LUKS2 header. It needs no root, no device-mapper and no kernel support, and
its images open with cryptsetup, dm-crypt and qemu.

A new header is ` + newHeaderHelp() + `. --cipher and
--key-size choose another.

Secrets are never taken as flag values: use --key-file FILE (- for stdin) or
type the passphrase at the terminal prompt.
` + exitStatusHelp,
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true,
		Version:           version(),
	}
	root.SetIn(g.stdin)
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	f := root.PersistentFlags()
	f.BoolVar(&g.quiet, "quiet", false, "print nothing but errors")
	f.BoolVarP(&g.batch, "batch-mode", "q", false, "do not ask for confirmation or to verify a new passphrase (as cryptsetup -q)")
	f.BoolVar(&g.slowKDF, "allow-slow-kdf", false, "unlock even when the header asks for over a minute of key derivation or over half of the RAM")
	f.BoolVar(&g.nullOK, "allow-null-cipher", false, "use a LUKS2 keyslot or data segment under the null cipher (cipher_null: not encrypted), which is refused otherwise; such a keyslot opens only with an empty passphrase")
	f.StringVar(&g.progress, "progress", "auto", "progress display: auto, bar, plain, json or none")
	f.IntVarP(&g.jobs, "jobs", "j", 0, "parallel workers (default: number of CPUs, at most the cgroup CPU limit)")
	f.IntVar(&g.chunk, "chunk-size", 0, "bytes read, transformed and written at a time, a multiple of "+strconv.Itoa(image.SectorSize)+" from 64 KiB to 64 MiB; memory is about (2 x jobs + 2) chunks (default 1 MiB)")
	f.StringVar(&g.header, "header", "", "detached LUKS header file (as cryptsetup --header): the header and key slots are in FILE, the data in IMAGE; for encrypt, decrypt, ls, cat, open and the key and header commands")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		g.cmdCtx = cmd.Context()
		if g.header != "" && !detachedCommands[cmd.Name()] {
			return usagef("%s does not take --header", cmd.CommandPath())
		}
		return g.validate()
	}
	root.AddCommand(
		newEncryptCommand(g),
		newDecryptCommand(g),
		newVerifyCommand(g),
		newReencryptCommand(g),
		newDumpCommand(g),
		newVersionCommand(g),
		newBenchmarkCommand(g),
		newAddKeyCommand(g),
		newRemoveKeyCommand(g),
		newChangeKeyCommand(g),
		newKillSlotCommand(g),
		newTestKeyCommand(g),
		newHeaderBackupCommand(g),
		newHeaderRestoreCommand(g),
		newUUIDCommand(g),
		newIsLUKSCommand(g),
		newConfigCommand(g),
		newTokenCommand(g),
		newEnrollCommand(g),
		newRepairCommand(g),
		newConvertCommand(g),
		newLsCommand(g),
		newCatCommand(g),
		newOpenCommand(g),
		newCloseCommand(g),
		newCloneCommand(g),
		newCreateCommand(g),
		newEraseCommand(g),
		newResizeCommand(g),
		newVerityCommand(g),
		newCompletionCommand(g),
		newManCommand(g),
	)
	// newCompletionCommand replaces cobra's default completion command.
	root.CompletionOptions.DisableDefaultCmd = true
	registerFlagCompletions(root)
	return root
}

func main() {
	// Every command may hold a key: no core dumps, no ptrace or reading
	// of this process's memory by other processes of the user, and room to
	// lock secrets (docs/ARCHITECTURE.md, "Secrets in memory"). Should prctl
	// fail (a seccomp filter), the commands still work.
	secmem.Harden()
	os.Exit(run(os.Args[1:]))
}

// run executes one command line and returns the exit code.
func run(args []string) int {
	g := &globalOptions{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		stdinFile: os.Stdin, stderrFile: os.Stderr,
		cleanup: &cleanupList{},
	}
	ignoreSIGPIPE()
	ctx, stop := signalContext(g)
	defer stop()
	return execute(ctx, g, args)
}

func execute(ctx context.Context, g *globalOptions, args []string) int {
	if g.cleanup == nil {
		g.cleanup = &cleanupList{}
	}
	root := newRootCommand(g)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	msg, h := oneLine(err.Error()), hint(err)
	kh := keyHint(g, code)
	if code == exitInterrupted {
		msg = "interrupted"
		if h != "" {
			fmt.Fprintf(g.stderr, "cryptimg: interrupted; %s\n", h)
		} else {
			fmt.Fprintln(g.stderr, "cryptimg: interrupted")
		}
	} else {
		line := msg
		if h != "" {
			line += " (" + h + ")"
		}
		fmt.Fprintf(g.stderr, "cryptimg: error: %s\n", line)
	}
	if kh != "" {
		fmt.Fprintf(g.stderr, "cryptimg: hint: %s\n", kh)
	}
	if jsonFlag(cmd, args) && !g.jsonReported {
		var hints []string
		for _, s := range []string{h, kh} {
			if s != "" {
				hints = append(hints, s)
			}
		}
		reportError(g, msg, strings.Join(hints, "; "), code)
	}
	return code
}

// jsonFlag reports whether cmd, which has a --json flag, was given it: as
// parsed, or, when parsing stopped at a bad flag before it, as written in
// args (before any "--").
func jsonFlag(cmd *cobra.Command, args []string) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("json")
	if f == nil || f.Value.Type() != "bool" {
		return false
	}
	if f.Changed {
		return f.Value.String() == "true"
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// errorJSON is what a failed command prints on stdout under --json: the
// error line's text, its hint and the exit code.
type errorJSON struct {
	MessageType string `json:"message_type"` // "error"
	Error       string `json:"error"`
	Hint        string `json:"hint,omitempty"`
	ExitCode    int    `json:"exit_code"`
}

func reportError(g *globalOptions, msg, h string, code int) {
	json.NewEncoder(g.stdout).Encode(errorJSON{MessageType: "error", Error: msg, Hint: h, ExitCode: code})
}

// signalContext cancels the context on SIGINT or SIGTERM. Commands stop
// within a second; should one not, the process removes its temporary
// outputs and exits with 130 anyway.
func signalContext(g *globalOptions) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-ch; !ok {
			return
		}
		cancel()
		if g.graceful.Load() {
			<-ch
		} else {
			select {
			case <-ch:
			case <-time.After(900 * time.Millisecond):
			}
		}
		g.cleanup.run()
		fmt.Fprintln(g.stderr, "cryptimg: interrupted")
		os.Exit(exitInterrupted)
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel()
	}
}

// cleanupList holds the temporary files to remove if the process has to
// exit before a command unwinds.
type cleanupList struct {
	mu    sync.Mutex
	next  int
	funcs map[int]func()
}

func (c *cleanupList) add(f func()) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.funcs == nil {
		c.funcs = map[int]func(){}
	}
	id := c.next
	c.next++
	c.funcs[id] = f
	return func() {
		c.mu.Lock()
		delete(c.funcs, id)
		c.mu.Unlock()
	}
}

func (c *cleanupList) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.funcs {
		f()
	}
	c.funcs = nil
}

func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// usageError marks errors in how the command was called.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// detachedCommands take --header.
var detachedCommands = map[string]bool{
	"encrypt": true, "decrypt": true, "verify": true, "dump": true, "add-key": true, "change-key": true, "remove-key": true,
	"kill-slot": true, "test-key": true, "header-backup": true, "header-restore": true, "uuid": true, "is-luks": true, "config": true,
	"add": true, "remove": true, "import": true, "export": true, "repair": true, "ls": true, "cat": true, "open": true, "reencrypt": true, "convert": true,
	"create": true, "erase": true, "resize": true, "enroll": true,
}
