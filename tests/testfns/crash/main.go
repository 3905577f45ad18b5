// Command crash is a KRM function that fails the way real ones do: it writes
// a ResourceList with an error result, logs to stderr, and exits 1. With
// FNRUNNER_TEST_PANIC set in its config it crashes without output instead.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	in, _ := io.ReadAll(os.Stdin)
	if strings.Contains(string(in), "panic-now") {
		panic("crash: asked to panic")
	}
	fmt.Print(`apiVersion: config.kubernetes.io/v1
kind: ResourceList
items: []
results:
- message: the crash function always fails
  severity: error
`)
	fmt.Fprintln(os.Stderr, "crash: failing on purpose")
	os.Exit(1)
}
