// Command apply-setters is the catalog's apply-setters v0.2.2 function as a
// binary, built on its applysetters package (the catalog's own main no longer
// compiles against current kyaml).
package main

import (
	"os"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/functions/apply-setters/applysetters"
)

func main() {
	if err := fn.AsMain(fn.ResourceListProcessorFunc(applysetters.Run)); err != nil {
		os.Exit(1)
	}
}
