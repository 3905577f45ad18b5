// Command pause is the sandbox ("pause") container of the test node's pods:
// it holds the pod's namespaces, reaps what is reparented to it, and exits
// on SIGTERM or SIGINT. Nothing can be pulled from outside these machines,
// so tests/node builds the image from this binary.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
