// Command search-replace is fnrunner's own build of the KRM catalog's
// search-replace function (what the code of catalog commit 76fe3817,
// 2025-06-25, does; see package searchreplace): a ResourceList on stdin,
// the updated ResourceList on stdout, exit status 1 when the function fails,
// with v0.2.0's log (exitlog).
package main

import (
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
	"github.com/fnrunner/fnrunner/functions/search-replace/searchreplace"
)

func main() {
	if err := exitlog.AsMain(fn.ResourceListProcessorFunc(searchreplace.Run)); err != nil {
		os.Exit(1)
	}
}
