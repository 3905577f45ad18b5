// Writing a rendered package back, pruning what it no longer holds, never
// through a symbolic link.

package kptrender

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// writePackage writes items below root by their paths and removes the
// files of read that no item is in any more (kpt prunes only what it read
// for the packages it rendered). It refuses to write or remove through a
// symbolic link: a package, or a function, must not reach outside root.
func writePackage(root string, items []*yaml.RNode, read map[string]bool) error {
	written := map[string]bool{}
	for _, it := range items {
		p, _, err := kioutil.GetFileAnnotations(it)
		if err != nil {
			return err
		}
		if err := noSymlinkBelow(root, p); err != nil {
			return err
		}
		written[p] = true
	}
	for p := range read {
		if err := noSymlinkBelow(root, p); err != nil {
			return err
		}
	}
	w := &kio.LocalPackageWriter{PackagePath: root}
	if err := w.Write(items); err != nil {
		return err
	}
	for p := range read {
		if written[p] {
			continue
		}
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pruning %s: %w", p, err)
		}
	}
	return nil
}

// noSymlinkBelow says whether rel, a path relative to root, names a file
// reached through a symbolic link (or outside root): such a file is not
// read, written or removed.
func noSymlinkBelow(root, rel string) error {
	clean := filepath.Clean(rel)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return fmt.Errorf("resource path %q is outside the package", rel)
	}
	cur := root
	for _, part := range strings.Split(clean, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created by the write, below no link
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("resource path %q goes through the symbolic link %s", rel, cur)
		}
	}
	return nil
}
