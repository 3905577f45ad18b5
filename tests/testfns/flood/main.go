// Command flood is a KRM function that writes 1 GiB to stdout, to prove that
// a runner caps a function's output instead of buffering it.
package main

import (
	"io"
	"os"
)

func main() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = 'x'
	}
	for i := 0; i < 1024; i++ {
		if _, err := os.Stdout.Write(chunk); err != nil {
			os.Exit(1)
		}
	}
}
