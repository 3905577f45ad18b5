// bench sandbox: set-namespace run by fnexec in each sandbox layer set.

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/tools/bench/load"
)

func sandboxCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench sandbox", flag.ContinueOnError)
	helper := fs.String("fnsandbox-binary", "", "Path of the fnsandbox helper (set by the Bazel target).")
	function := fs.String("set-namespace-binary", "", "Path of the set-namespace function binary (set by the Bazel target).")
	n := fs.Int("n", 300, "Calls per row, one at a time.")
	size := fs.Int("size", 2<<10, "Input size in bytes.")
	pause := fs.Duration("pause", 50*time.Millisecond, "The pause between calls of the paced rows (not counted).")
	interleavedOnly := fs.Bool("interleaved-only", false, "Run only the interleaved rows (bare exec, none and the warm layer sets), not the processes started ahead: a larger -n in the same time.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := binaries("sandbox", helper, function); err != nil {
		return err
	}
	input := load.SetNamespaceInput(*size)
	tempDir, err := callsDir("bench-sandbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tempDir)
	// As the binary-runner makes them: ahead of the calls.
	dirs, err := fnexec.NewDirs(tempDir)
	if err != nil {
		return err
	}
	defer dirs.Close()
	var done cleanups
	defer done.run()
	b := &sandboxBench{helper: *helper, function: *function, tempDir: tempDir, dirs: dirs, input: input}
	rows, bare, none := b.interleaved(ctx, out, *n, &done)
	if !*interleavedOnly {
		rows = append(rows, b.ahead(ctx, out, *n, *pause)...)
	}
	printSandbox(out, len(input), rows, bare, none)
	return nil
}

// sandboxRow is one row's calls.
type sandboxRow struct {
	name  string
	stats load.Stats
}

// sandboxBench is what the rows of bench sandbox share: the binaries, the
// calls' directories and the input.
type sandboxBench struct {
	helper, function string
	tempDir          string
	dirs             *fnexec.Dirs
	input            []byte
}

// open opens the sandbox layers mode names, with warm helpers and pre
// functions started ahead, and names its row.
func (b *sandboxBench) open(ctx context.Context, mode string, warm, pre int) (*sandbox.Sandbox, string, error) {
	sb, err := openSandbox(ctx, b.helper, b.tempDir, mode, warm, pre)
	return sb, fmt.Sprintf("fnexec, --sandbox=%s --sandbox-warm-helpers=%d --sandbox-prestarted-functions=%d", mode, warm, pre), err
}

// via is a call of the function through fnexec, in sb when it is enabled.
func (b *sandboxBench) via(sb *sandbox.Sandbox) load.Call {
	opts := fnexec.Options{TempDir: b.tempDir, Dirs: b.dirs}
	if sb.Enabled() {
		opts.Sandbox = sb
	}
	return func(ctx context.Context) error {
		_, err := fnexec.Run(ctx, []string{b.function}, bytes.NewReader(b.input), opts)
		return err
	}
}

// interleaved runs the bare exec and the layers, interleaved: a round is
// one call of each, n rounds. It returns their rows and the bare exec's
// and --sandbox=none's stats; the sandboxes stay open until done runs.
func (b *sandboxBench) interleaved(ctx context.Context, out io.Writer, n int, done *cleanups) (rows []sandboxRow, bare, none load.Stats) {
	names := []string{"bare exec (os/exec)"}
	calls := []load.Call{bareExec(b.input, b.function)}
	for _, r := range []struct {
		mode string
		warm int
	}{
		{"none", 0}, {"base", 0}, {"base", 4}, {"base,landlock", 4}, {"base,landlock,uid", 4},
		{"base,landlock,uid,userns", 4}, {"base,landlock,uid,userns,cgroup", 4},
	} {
		sb, name, err := b.open(ctx, r.mode, r.warm, 0)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", name, err)
			continue
		}
		done.add(sb.Close)
		names, calls = append(names, name), append(calls, b.via(sb))
	}
	time.Sleep(200 * time.Millisecond) // the warm helpers start
	for i, s := range load.Interleaved(ctx, n, calls) {
		switch i {
		case 0:
			bare = s
		case 1:
			none = s
		}
		rows = append(rows, sandboxRow{names[i] + ", interleaved", s})
	}
	return rows, bare, none
}

// ahead runs the rows of processes started ahead (and a paced bare exec
// first): one scenario after the other, as the time between a scenario's
// calls is what they use.
func (b *sandboxBench) ahead(ctx context.Context, out io.Writer, n int, pause time.Duration) []sandboxRow {
	rows := []sandboxRow{{fmt.Sprintf("bare exec (os/exec), %v between calls", pause), load.Paced(ctx, n, pause, bareExec(b.input, b.function))}}
	for _, r := range []struct {
		mode  string
		paced bool
	}{
		{"base", false}, {"base", true}, {"base,landlock", true}, {"base,landlock,uid", true},
		{"base,landlock,uid,userns", true}, {"base,landlock,uid,userns,cgroup", false}, {"base,landlock,uid,userns,cgroup", true},
	} {
		sb, name, err := b.open(ctx, r.mode, 4, 4)
		if r.paced {
			name += fmt.Sprintf(", %v between calls", pause)
		}
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", name, err)
			continue
		}
		time.Sleep(200 * time.Millisecond) // the warm helpers start
		var s load.Stats
		if r.paced {
			s = load.Paced(ctx, n, pause, b.via(sb))
		} else {
			s = load.Run(ctx, n, 1, b.via(sb))
		}
		sb.Close()
		rows = append(rows, sandboxRow{name, s})
	}
	return rows
}

// printSandbox prints the rows as a table, each compared with the bare
// exec and with --sandbox=none.
func printSandbox(out io.Writer, inputSize int, rows []sandboxRow, bare, none load.Stats) {
	fmt.Fprintf(out, "set-namespace v0.4.5 on %d bytes, one call at a time; + p50 = p50 - p50 of the bare exec, or of --sandbox=none;\n"+
		"paired = the median over rounds of (this call - the bare exec's in the same round), interleaved rows only\n\n", inputSize)
	fmt.Fprintf(out, "| scenario | n | errors | p50 | p90 | p99 | + p50 over bare exec | + p50 over none | paired over bare exec |\n|---|---|---|---|---|---|---|---|---|\n")
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	for _, r := range rows {
		s := r.stats
		paired := "-"
		if strings.HasSuffix(r.name, ", interleaved") {
			paired = round(s.PairedP50).String()
		}
		fmt.Fprintf(out, "| %s | %d | %d | %v | %v | %v | %v | %v | %s |\n", r.name, s.Calls, s.Errors,
			round(s.P50), round(s.P90), round(s.P99), round(s.P50-bare.P50), round(s.P50-none.P50), paired)
		if s.FirstError != nil {
			fmt.Fprintf(out, "  first error: %v\n", s.FirstError)
		}
	}
}
