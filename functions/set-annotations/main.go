// Command set-annotations is fnrunner's set-annotations v0.1.4 KRM
// function (package setannotations, RunV014) as a binary: a ResourceList
// on standard input, the result on standard output, exit code 1 on
// failure, with the log v0.1.4's binary wrote (exitlog).
package main

import (
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/set-annotations/setannotations"
)

func main() {
	if err := exitlog.AsMain(fn.ResourceListProcessorFunc(setannotations.RunV014)); err != nil {
		os.Exit(1)
	}
}
