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

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/starlark/bounds"
	"github.com/fnrunner/fnrunner/functions/starlark/script"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	"github.com/fnrunner/fnrunner/libs/sandbox"
	"github.com/fnrunner/fnrunner/tools/bench/load"
)

// starlarkCmd measures the two ways a bounded starlark could run in the
// binary-runner: in its process (the bounded fork's entry called as the go
// executor calls its functions, which fnrunner does not ship) and as the
// process fnrunner runs (the same code as a binary, started by fnexec as
// the go executor's starlark entry starts it, in each sandbox layer set),
// beside a bare exec of that binary. Rows interleaved, paired over the
// in-process call of the same round.
func starlarkCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench starlark", flag.ContinueOnError)
	helper := fs.String("fnsandbox-binary", "", "Path of the fnsandbox helper (set by the Bazel target).")
	function := fs.String("starlark-binary", "", "Path of fnrunner's starlark binary (set by the Bazel target).")
	n := fs.Int("n", 200, "Rounds on the small input; the large input gets a tenth.")
	small := fs.Int("size", 2<<10, "The small input's size in bytes.")
	large := fs.Int("large-size", 256<<10, "The large input's size in bytes (0: none).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := binaries("starlark", helper, function); err != nil {
		return err
	}
	tempDir, err := callsDir("bench-starlark-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tempDir)
	dirs, err := fnexec.NewDirs(tempDir)
	if err != nil {
		return err
	}
	defer dirs.Close()
	b := bounds.Bounds{MaxSteps: bounds.DefaultMaxSteps, MaxDepth: bounds.DefaultMaxDepth}
	argv := append([]string{*function}, b.Args()...)

	names := []string{"in process (the bounded fork's entry, fn.Run; not shipped)", "bare exec of the binary (os/exec)"}
	var sandboxes []*sandbox.Sandbox
	defer func() {
		for _, sb := range sandboxes {
			sb.Close()
		}
	}()
	for _, mode := range []string{"none", "base,landlock", "base,landlock,uid", "auto"} {
		sb, err := openSandbox(ctx, *helper, tempDir, mode, 4, 0)
		name := fmt.Sprintf("process, fnexec --sandbox=%s", mode)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", name, err)
			continue
		}
		if mode == "auto" {
			name = fmt.Sprintf("process, fnexec --sandbox=auto (%s here)", strings.Join(sb.LayerNames(), ","))
		}
		sandboxes = append(sandboxes, sb)
		names = append(names, name)
	}
	time.Sleep(200 * time.Millisecond) // the warm helpers start

	calls := func(input []byte) []load.Call {
		cs := []load.Call{
			func(context.Context) error {
				_, err := fn.Run(script.Process(b), input)
				return err
			},
			bareExec(input, argv[0], argv[1:]...),
		}
		for _, sb := range sandboxes {
			opts := fnexec.Options{TempDir: tempDir, Dirs: dirs}
			if sb.Enabled() {
				opts.Sandbox = sb
			}
			cs = append(cs, func(ctx context.Context) error {
				_, err := fnexec.Run(ctx, argv, bytes.NewReader(input), opts)
				return err
			})
		}
		return cs
	}

	fmt.Fprintf(out, "starlark (fnrunner's bounded build of the catalog's v0.5.5), a script labelling every item, one call at a time,\n"+
		"interleaved; paired = the median over rounds of (this call - the in-process call in the same round)\n\n")
	fmt.Fprintf(out, "| input | scenario | n | errors | p50 | p90 | p99 | + p50 over in process | paired over in process |\n|---|---|---|---|---|---|---|---|---|\n")
	round := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	for _, size := range []struct{ bytes, rounds int }{{*small, *n}, {*large, max(*n/10, 5)}} {
		if size.bytes <= 0 {
			continue
		}
		input := load.StarlarkInput(size.bytes)
		// Interleaved measures each call against the first of its round.
		stats := load.Interleaved(ctx, size.rounds, calls(input))
		for i, s := range stats {
			fmt.Fprintf(out, "| %d KiB | %s | %d | %d | %v | %v | %v | %v | %v |\n", len(input)>>10, names[i], s.Calls, s.Errors,
				round(s.P50), round(s.P90), round(s.P99), round(s.P50-stats[0].P50), round(s.PairedP50))
			if s.FirstError != nil {
				fmt.Fprintf(out, "  first error: %v\n", s.FirstError)
			}
		}
	}
	return nil
}
