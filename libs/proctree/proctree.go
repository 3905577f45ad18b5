// Package proctree measures the memory a process tree holds: what a
// function call's processes cost their container, however much address
// space they only reserve.
//
// It reads procfs: each process's children from
// /proc/<pid>/task/<tid>/children where the kernel has them
// (CONFIG_PROC_CHILDREN), else every process's parent from /proc/<pid>/stat,
// and each process's resident memory from /proc/<pid>/status.
package proctree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrUnreadable is a process tree whose memory could not be read.
var ErrUnreadable = errors.New("cannot read the memory of the call's processes")

// Tree reads the processes below one process from a procfs.
type Tree struct {
	// Proc is where procfs is mounted ("" is /proc).
	Proc string
}

func (t Tree) proc() string {
	if t.Proc == "" {
		return "/proc"
	}
	return t.Proc
}

// Resident is the memory root's descendants hold (root's too, with self):
// their anonymous and shared-memory pages (RssAnon and RssShmem), which is
// what their cgroup is charged for them beside page cache. A file's pages,
// shared with every process that maps the file, and address space reserved
// but never touched count for nothing. A process that ends while it is
// read counts for nothing either.
func (t Tree) Resident(root int, self bool) (uint64, error) {
	pids, err := t.Descendants(root)
	if err != nil {
		return 0, err
	}
	if self {
		pids = append(pids, root)
	}
	var total uint64
	for _, pid := range pids {
		n, err := t.resident(pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// gone says whether err is a process that ended while it was read: its
// files are gone, or they answer ESRCH once it has been reaped.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) || errors.Is(err, errGone)
}

// errGone is a process that has exited and whose threads have too: it
// holds no memory.
var errGone = errors.New("process has no memory")

// resident is RssAnon + RssShmem of pid. A process whose main thread
// exited while others run shows no memory in its own status (that of a
// zombie); its memory, one for all its threads, is read from a live one's.
func (t Tree) resident(pid int) (uint64, error) {
	n, err := t.statusMemory(filepath.Join(t.proc(), strconv.Itoa(pid), "status"))
	if !errors.Is(err, errGone) {
		return n, err
	}
	tasks, err := os.ReadDir(filepath.Join(t.proc(), strconv.Itoa(pid), "task"))
	if err != nil {
		return 0, err
	}
	for _, task := range tasks {
		n, err := t.statusMemory(filepath.Join(t.proc(), strconv.Itoa(pid), "task", task.Name(), "status"))
		if gone(err) {
			continue
		}
		return n, err
	}
	return 0, errGone
}

// statusMemory is RssAnon + RssShmem from a status file.
func (t Tree) statusMemory(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var total uint64
	found := false
	for line := range bytes.Lines(data) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.Equal(name, []byte("RssAnon")) && !bytes.Equal(name, []byte("RssShmem")) {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(string(value)), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading %s of %s: %w", name, path, err)
		}
		total += kb << 10
		found = true
	}
	if !found { // a zombie's status has no memory lines
		return 0, errGone
	}
	return total, nil
}

// Descendants are the processes below root: its children, theirs, and so
// on. A process whose parent ended is below the parent's nearest child
// subreaper (or init), no longer below root unless root is that subreaper.
func (t Tree) Descendants(root int) ([]int, error) {
	children, err := t.childrenOf(root)
	if errors.Is(err, errNoChildrenFiles) {
		return t.scan(root)
	}
	if err != nil {
		return nil, err
	}
	var out []int
	seen := map[int]bool{root: true}
	for len(children) > 0 {
		pid := children[len(children)-1]
		children = children[:len(children)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		more, err := t.childrenOf(pid)
		if gone(err) {
			continue // it ended meanwhile
		}
		if err != nil {
			return nil, err
		}
		children = append(children, more...)
	}
	return out, nil
}

// errNoChildrenFiles is a kernel without /proc/<pid>/task/<tid>/children.
var errNoChildrenFiles = errors.New("no children files in procfs")

// childrenOf lists the children of every thread of pid.
func (t Tree) childrenOf(pid int) ([]int, error) {
	tasks, err := os.ReadDir(filepath.Join(t.proc(), strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join(t.proc(), strconv.Itoa(pid), "task", task.Name(), "children"))
		if gone(err) {
			if _, serr := os.Stat(filepath.Join(t.proc(), strconv.Itoa(pid), "task", task.Name())); serr == nil {
				return nil, errNoChildrenFiles
			}
			continue // the thread ended
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(data)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("children of process %d: %w", pid, err)
			}
			out = append(out, child)
		}
	}
	return out, nil
}

// scan finds root's descendants from every process's parent.
func (t Tree) scan(root int) ([]int, error) {
	entries, err := os.ReadDir(t.proc())
	if err != nil {
		return nil, err
	}
	parent := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, err := t.parent(pid)
		if err != nil {
			continue // it ended meanwhile
		}
		parent[ppid] = append(parent[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range parent[pid] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// parent is the fourth field of /proc/<pid>/stat, after the command name
// (which may hold spaces and parentheses: it ends at the last ')').
func (t Tree) parent(pid int) (int, error) {
	f, err := os.Open(filepath.Join(t.proc(), strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return 0, err
	}
	i := strings.LastIndexByte(line, ')')
	fields := strings.Fields(line[i+1:])
	if i < 0 || len(fields) < 2 {
		return 0, fmt.Errorf("process %d: unreadable stat %q", pid, line)
	}
	return strconv.Atoi(fields[1])
}

// Watch samples the memory of root's tree (Resident) every interval until
// ctx ends, and calls over, once, with what it found the first time that is
// more than limit() (read at each sample: a bound may shrink as what else
// the call holds grows), or with ErrUnreadable's error when the tree cannot
// be read while root lives (a bound that cannot be checked is not kept);
// then it returns. Root's end ends the watch.
func (t Tree) Watch(ctx context.Context, root int, self bool, limit func() uint64, interval time.Duration, over func(used uint64, err error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		used, err := t.Resident(root, self)
		if err != nil {
			if _, serr := os.Stat(filepath.Join(t.proc(), strconv.Itoa(root))); serr != nil {
				return // root ended
			}
			over(used, fmt.Errorf("%w: %w", ErrUnreadable, err))
			return
		}
		if used > limit() {
			over(used, nil)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
