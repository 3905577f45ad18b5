// Command orphan is a KRM function that succeeds (it returns its input) but
// leaves a child process behind that would outlive it, to prove that nothing
// of a function survives its call.
package main

import (
	"io"
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		for { // the child: sleep forever
			time.Sleep(time.Hour)
		}
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(2)
	}
	child := exec.Command(os.Args[0], "child")
	if err := child.Start(); err != nil {
		os.Exit(3)
	}
	_, _ = os.Stdout.Write(in)
}
