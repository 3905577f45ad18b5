// Command set-annotations-unstable is fnrunner's set-annotations as the
// catalog's :unstable tag behaved at commit
// 76fe3817f9496724ca04414d136917a9926e5e40, which the conformance corpus
// records (package setannotations, Run), as a binary: a ResourceList on
// standard input, the result on standard output, exit code 1 on failure.
package main

import (
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/set-annotations/setannotations"
)

func main() {
	if err := fn.AsMain(fn.ResourceListProcessorFunc(setannotations.Run)); err != nil {
		os.Exit(1)
	}
}
