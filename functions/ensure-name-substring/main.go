// Command ensure-name-substring is fnrunner's ensure-name-substring v0.1.1
// KRM function (package ensurenamesubstring, Run) as a binary: a
// ResourceList on standard input, the result on standard output, exit code
// 1 on failure, with v0.1.1's log (exitlog).
package main

import (
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/ensure-name-substring/ensurenamesubstring"
	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
)

func main() {
	if err := exitlog.AsMain(fn.ResourceListProcessorFunc(ensurenamesubstring.Run)); err != nil {
		os.Exit(1)
	}
}
