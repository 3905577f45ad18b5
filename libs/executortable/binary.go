package executortable

import (
	"fmt"
	"path/filepath"
	"strings"
)

// ResolveBinary turns a binaryExecutor path into the binary to run: a
// relative path is taken inside dir and may not leave it; an absolute path
// only when allowAbsolute. The config-reconciler reports the same errors in
// FunctionConfig status that the binary-runner enforces. It only computes a
// path: nothing is looked up or run.
func ResolveBinary(dir, path string, allowAbsolute bool) (string, error) {
	clean := filepath.Clean(path)
	if filepath.IsAbs(clean) {
		if !allowAbsolute {
			return "", fmt.Errorf("binary path %q is absolute, and absolute paths are not allowed (--allow-absolute-binary-paths)", path)
		}
		return clean, nil
	}
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("binary path %q leaves the functions directory", path)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("functions directory %q: %w", dir, err)
	}
	return filepath.Join(abs, clean), nil
}
