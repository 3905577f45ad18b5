// Command reserve is a KRM function that copies its input to its output
// after reserving 4 GiB of address space it never touches, as the
// catalog's starlark v0.3.0 does at start (go.starlark.net maps 4 GiB
// read-only to encode small integers as pointers): a sandbox that bounds
// address space instead of memory used refuses it ("mmap: cannot allocate
// memory").
package main

import (
	"io"
	"log"
	"os"
	"syscall"
)

func main() {
	reserved, err := syscall.Mmap(-1, 0, 4<<30, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		log.Fatalf("mmap: %v", err)
	}
	defer syscall.Munmap(reserved)
	if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
		log.Fatal(err)
	}
}
