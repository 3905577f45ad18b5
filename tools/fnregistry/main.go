// Command fnregistry writes what functions/registry.yaml makes: the
// binary-runner's catalog, the Bazel list of function binaries, the
// FunctionConfigs of deploy/local, the conformance test's versions and the
// table of docs/catalog.md. Its test fails while one of them is stale.
//
//	tools/bazel run //tools/fnregistry
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	fs := flag.NewFlagSet("fnregistry", flag.ExitOnError)
	root := fs.String("root", os.Getenv("BUILD_WORKSPACE_DIRECTORY"), "The repository's root (default: the workspace `tools/bazel run` is run in).")
	_ = fs.Parse(os.Args[1:])
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "fnregistry:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	if root == "" {
		return fmt.Errorf("no -root, and not run by %q", UpdateCommand)
	}
	r, err := Load(filepath.Join(root, RegistryPath))
	if err != nil {
		return err
	}
	files, err := Generate(r, func(rel string) ([]byte, error) { return os.ReadFile(filepath.Join(root, rel)) })
	if err != nil {
		return err
	}
	for rel, data := range files {
		if err := os.WriteFile(filepath.Join(root, rel), data, 0o644); err != nil {
			return err
		}
	}
	// A FunctionConfig whose function left the registry goes with it.
	stale, err := Stale(os.DirFS(root), files)
	if err != nil {
		return err
	}
	for _, rel := range stale {
		if err := os.Remove(filepath.Join(root, rel)); err != nil {
			return err
		}
	}
	fmt.Printf("fnregistry: wrote %d files, removed %d: %s\n", len(files), len(stale), strings.Join(stale, " "))
	return nil
}
