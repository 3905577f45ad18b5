package fnexec

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Dirs makes calls' private directories ahead of the calls and removes
// after them, off their path, the ones their function left empty: on a
// disk-backed temp dir a mkdir and an rmdir are about 0.2 ms of a 2 KiB
// call (tools/bench path). A directory the function wrote into is removed
// before its call returns, as without Dirs, so that the space it took is
// free again for the next call.
type Dirs struct {
	root string
	// ready are directories made ahead, each for one call.
	ready chan string
	// empty are directories a call left empty, to remove.
	empty chan string
	// kick wakes the maker when a ready directory was taken.
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	closed bool // no more queued removals
}

// Bounds of a Dirs.
const (
	// dirsAhead is how many directories wait, made ahead.
	dirsAhead = 4
	// dirsQueued is how many empty directories may wait to be removed; a
	// call finding the queue full removes its own.
	dirsQueued = 64
)

// NewDirs starts making private directories below root ("" = the system
// temp dir), made absolute now: the working directory may change later.
// Close stops it.
func NewDirs(root string) (*Dirs, error) {
	if root == "" {
		root = os.TempDir()
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	d := &Dirs{root: root, ready: make(chan string, dirsAhead), empty: make(chan string, dirsQueued),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go d.run()
	return d, nil
}

// run removes the queued empty directories, then makes the missing ready
// ones; when there is nothing to do, it waits for a removal, a taken
// directory or Close, and when a directory cannot be made (a full disk) for
// one of those or a second.
func (d *Dirs) run() {
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case dir := <-d.empty:
			removeEmpty(dir)
			continue
		default:
		}
		var retry <-chan time.Time
		if len(d.ready) < cap(d.ready) {
			// Only run adds to ready, so there is room.
			dir, err := os.MkdirTemp(d.root, "fn-")
			if err == nil {
				d.ready <- dir
				continue
			}
			// A full disk, say: calls make their own meanwhile.
			retry = time.After(time.Second)
		}
		select {
		case <-d.stop:
			return
		case dir := <-d.empty:
			removeEmpty(dir)
		case <-d.kick:
		case <-retry:
		}
	}
}

// take is a directory made ahead, if one is ready.
func (d *Dirs) take() (string, bool) {
	select {
	case dir := <-d.ready:
		select {
		case d.kick <- struct{}{}:
		default:
		}
		return dir, true
	default:
		return "", false
	}
}

// remove removes dir once its call has ended: now when the function wrote
// into it, after the call when it is empty.
func (d *Dirs) remove(dir string) {
	if !isEmptyDir(dir) {
		removeTree(dir)
		return
	}
	d.mu.Lock()
	queued := false
	if !d.closed {
		select {
		case d.empty <- dir:
			queued = true
		default:
		}
	}
	d.mu.Unlock()
	if !queued {
		removeEmpty(dir)
	}
}

// Close stops making directories and removes the ready and the queued
// ones. Calls still running remove theirs themselves.
func (d *Dirs) Close() {
	d.once.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(d.stop)
		<-d.done
		for {
			select {
			case dir := <-d.ready:
				removeEmpty(dir)
			case dir := <-d.empty:
				removeEmpty(dir)
			default:
				return
			}
		}
	})
}

// removeEmpty removes a directory thought empty; if something got into it
// meanwhile, all of it.
func removeEmpty(dir string) {
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		removeTree(dir)
	}
}

// removeTree removes dir and all below it, even where the function took
// its own permissions away (chmod 0 on a directory it made, or on its
// private directory): those are given back first, as the runner may when
// the function ran as its uid.
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700) // before WalkDir reads it
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// isEmptyDir says whether dir can be read and holds nothing.
func isEmptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}
