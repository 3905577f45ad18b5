// Command flagref writes docs/flags.md, the reference of every flag of
// fnrunner's services, from each service's own --help:
//
//	tools/bazel run //tools/flagref -- -out=$PWD/docs/flags.md
//
// The Bazel target passes the service binaries (-service=NAME=PATH, in the
// order of the reference's sections). Defaults that depend on the host
// (GOMAXPROCS, the host name, the temp and home directories, the binary's
// own path) are replaced by placeholders, so that every machine writes the
// same file; flagref_test fails when docs/flags.md is not that file.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// UpdateCommand regenerates docs/flags.md from the repository's root.
const UpdateCommand = "tools/bazel run //tools/flagref -- -out=$PWD/docs/flags.md"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "flagref:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("flagref", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "File to write the reference to (an absolute path: bazel run runs in the runfiles); empty: standard output.")
	var services []Service
	fs.Func("service", "NAME=PATH of a service binary, repeatable, in section order (set by the Bazel target).", func(v string) error {
		name, path, ok := strings.Cut(v, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("%q is not NAME=PATH", v)
		}
		services = append(services, Service{Name: name, Binary: path})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(services) == 0 {
		return fmt.Errorf("no -service given: run it with %s", UpdateCommand)
	}
	doc, err := Generate(services)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = io.WriteString(stdout, doc)
		return err
	}
	if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s\n", *out)
	return nil
}

// Generate reads every service's --help and renders the reference.
func Generate(services []Service) (string, error) {
	helps := make([]Help, len(services))
	for i, s := range services {
		h, err := Read(s)
		if err != nil {
			return "", err
		}
		helps[i] = h
	}
	return Render(UpdateCommand, services, helps), nil
}
