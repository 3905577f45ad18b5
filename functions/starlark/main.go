// Command starlark is the catalog's starlark function (v0.5.5) with bounds:
// fnrunner's binary-runner runs it, sandboxed, for the starlark image. Its
// flags come from the runner (bounds.Bounds.Args); a script that exceeds
// them fails with an error result, like any failing script.
package main

import (
	"flag"
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/starlark/bounds"
	"github.com/fnrunner/fnrunner/functions/starlark/script"
)

func main() {
	var b bounds.Bounds
	fs := flag.NewFlagSet("starlark", flag.ContinueOnError)
	b.Register(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := fn.AsMain(script.Process(b)); err != nil {
		os.Exit(1)
	}
}
