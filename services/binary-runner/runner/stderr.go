package runner

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// stderrTap captures what an in-process function writes straight to the
// process's stderr (starlark's print() does): it swaps file descriptor 2 for
// a pipe while the function runs. Only one such function runs at a time.
// The runner's own logs do not go through fd 2 (see DetachLog), so they are
// never captured.
type stderrTap struct {
	mu sync.Mutex
}

// capture runs f and returns up to limit bytes of what was written to fd 2.
func (t *stderrTap) capture(limit int, f func()) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	defer r.Close()
	saved, err := unix.Dup(2)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("saving stderr: %w", err)
	}
	if err := unix.Dup2(int(w.Fd()), 2); err != nil {
		w.Close()
		unix.Close(saved)
		return nil, fmt.Errorf("redirecting stderr: %w", err)
	}
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, int64(limit)))
		_, _ = io.Copy(io.Discard, r)
		out <- b
	}()
	defer unix.Close(saved)
	func() {
		// Restore fd 2 first, then close our end: the reader sees EOF only
		// when no descriptor of the pipe's write end is left.
		defer w.Close()
		defer func() { _ = unix.Dup2(saved, 2) }()
		f()
	}()
	return <-out, nil
}

// DetachLog returns a writer for the service's logs that is not file
// descriptor 2 when w is os.Stderr, so that capturing a function's stderr
// never captures the runner's own log lines.
func DetachLog(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok || f.Fd() != 2 {
		return w
	}
	fd, err := unix.Dup(2)
	if err != nil {
		return w
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "log")
}
