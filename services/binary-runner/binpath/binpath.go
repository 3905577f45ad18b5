// Package binpath decides, as every call of the binary executor does,
// which file a binary executor path runs and whether this runner can run
// it. The runner uses it for calls and the report package for what the
// runner tells the config-reconciler, so both judge a path the same way.
package binpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/fnrunner/fnrunner/libs/executortable"
)

// ErrMissing is a binary executor path with no executable file behind it in
// this runner.
var ErrMissing = errors.New("no executable binary")

// MissingError is a binary executor path with no executable regular file
// behind it in this runner. It is ErrMissing.
type MissingError struct {
	// Path is the executor's path, as the table gives it.
	Path string
	// Reason says why, in a few words: "no such file", "a directory",
	// "not a regular file" or "not executable".
	Reason string
}

var _ error = (*MissingError)(nil)

func (e *MissingError) Error() string {
	return fmt.Sprintf("%v at %s in the binary-runner (%s)", ErrMissing, e.Path, e.Reason)
}

// Is makes errors.Is(err, ErrMissing) true.
func (e *MissingError) Is(target error) bool { return target == ErrMissing }

// Resolve returns the file a binary executor path runs: by
// executortable.ResolveBinary's rules (relative to dir, absolute only when
// allowAbsolute), and only if an executable regular file is there (symbolic
// links followed). Otherwise it returns a *MissingError, the path rule's
// error, or the error of looking (permissions, I/O).
func Resolve(dir, path string, allowAbsolute bool) (string, error) {
	bin, err := executortable.ResolveBinary(dir, path, allowAbsolute)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(bin)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return "", &MissingError{Path: path, Reason: "no such file"}
	case err != nil:
		return "", fmt.Errorf("binary %s: %w", path, err)
	case st.IsDir():
		return "", &MissingError{Path: path, Reason: "a directory"}
	case !st.Mode().IsRegular():
		return "", &MissingError{Path: path, Reason: "not a regular file"}
	case st.Mode().Perm()&0o111 == 0:
		return "", &MissingError{Path: path, Reason: "not executable"}
	}
	return bin, nil
}

// Reason is a Resolve error in a few words: a missing binary's Reason,
// otherwise the error's text; "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var missing *MissingError
	if errors.As(err, &missing) {
		return missing.Reason
	}
	return err.Error()
}
