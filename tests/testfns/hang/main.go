// Command hang is a KRM function that never finishes and starts a child (a
// copy of itself) that would outlive it, to prove that deadlines are
// honoured and that nothing of a function survives its call.
package main

import (
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) == 1 {
		child := exec.Command(os.Args[0], "child")
		if err := child.Start(); err != nil {
			os.Exit(3)
		}
	}
	for {
		time.Sleep(time.Hour)
	}
}
