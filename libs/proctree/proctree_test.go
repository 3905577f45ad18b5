package proctree_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/proctree"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// With PROCTREE_LEADER_EXITS, main keeps to the main thread, whose exit
// then leaves the process a zombie leader with live threads.
func init() {
	if os.Getenv("PROCTREE_LEADER_EXITS") != "" {
		runtime.LockOSThread()
	}
}

// The test binary is also the processes measured: with PROCTREE_TOUCH=N it
// touches N MiB, with PROCTREE_RESERVE=N it maps N MiB it never touches,
// with PROCTREE_CHILD set it starts itself again as its child first, then
// it prints "ready" and waits for its standard input to close.
func TestMain(m *testing.M) {
	if os.Getenv("PROCTREE_ROLE") == "" {
		os.Exit(m.Run())
	}
	if os.Getenv("PROCTREE_CHILD") != "" {
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "PROCTREE_CHILD=")
		child.Stdin = os.Stdin
		out, err := child.StdoutPipe()
		if err != nil {
			panic(err)
		}
		if err := child.Start(); err != nil {
			panic(err)
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil {
			panic(err)
		}
		defer child.Wait()
	}
	var keep [][]byte
	if n, _ := strconv.Atoi(os.Getenv("PROCTREE_TOUCH")); n > 0 {
		b := make([]byte, n<<20)
		for i := range b {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	if n, _ := strconv.Atoi(os.Getenv("PROCTREE_RESERVE")); n > 0 {
		b, err := syscall.Mmap(-1, 0, n<<20, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			panic(err)
		}
		keep = append(keep, b)
	}
	if os.Getenv("PROCTREE_LEADER_EXITS") != "" {
		// The main thread exits alone; another goes on holding the
		// memory, waiting for its standard input to close.
		go func() {
			fmt.Println("ready")
			_, _ = os.Stdin.Read(make([]byte, 1))
			_ = keep
			os.Exit(0)
		}()
		time.Sleep(100 * time.Millisecond)
		syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0) // main runs on the main thread (init)
	}
	fmt.Println("ready")
	_, _ = os.Stdin.Read(make([]byte, 1))
	_ = keep
	os.Exit(0)
}

// start runs the test binary as a measured process with env; it is ready
// when start returns and ends with the test.
func start(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "PROCTREE_ROLE=1"), env...)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	buf := make([]byte, 6)
	_, err = out.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "ready\n", string(buf))
	return cmd
}

func TestResident(t *testing.T) {
	touched := start(t, "PROCTREE_TOUCH=64")
	reserved := start(t, "PROCTREE_RESERVE=4096")
	nested := start(t, "PROCTREE_TOUCH=32", "PROCTREE_CHILD=1")
	leaderless := start(t, "PROCTREE_TOUCH=48", "PROCTREE_LEADER_EXITS=1")
	harness.WaitFor(t, "the main thread to exit", func() bool {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(leaderless.Process.Pid), "status"))
		return err == nil && strings.Contains(string(status), "State:\tZ")
	})
	for name, tree := range map[string]proctree.Tree{"children files": {}, "parents only": {Proc: scanOnly(t)}} {
		t.Run(name, func(t *testing.T) {

			used, err := tree.Resident(touched.Process.Pid, true)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, used, uint64(64<<20), "touched pages count")
			assert.Less(t, used, uint64(96<<20))

			used, err = tree.Resident(reserved.Process.Pid, true)
			require.NoError(t, err)
			assert.Less(t, used, uint64(32<<20), "4 GiB reserved, untouched, counts for nothing")

			below, err := tree.Resident(nested.Process.Pid, false)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, below, uint64(32<<20), "a child counts for its parent")
			assert.Less(t, below, uint64(64<<20), "and not the parent itself")
			all, err := tree.Resident(nested.Process.Pid, true)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, all, below+32<<20)

			used, err = tree.Resident(leaderless.Process.Pid, true)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, used, uint64(48<<20), "a process whose main thread exited counts its threads' memory")

			pids, err := tree.Descendants(touched.Process.Pid)
			require.NoError(t, err)
			assert.Empty(t, pids)
		})
	}
}

// scanOnly is a view of /proc as a kernel without CONFIG_PROC_CHILDREN has
// it: each process's stat and status (links to /proc's), and its threads
// without children files.
func scanOnly(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		pid := filepath.Join(dir, e.Name())
		tasks, err := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		if err != nil {
			continue // it ended meanwhile
		}
		for _, task := range tasks {
			require.NoError(t, os.MkdirAll(filepath.Join(pid, "task", task.Name()), 0o755))
			require.NoError(t, os.Symlink(filepath.Join("/proc", e.Name(), "task", task.Name(), "status"), filepath.Join(pid, "task", task.Name(), "status")))
		}
		for _, f := range []string{"stat", "status"} {
			require.NoError(t, os.Symlink(filepath.Join("/proc", e.Name(), f), filepath.Join(pid, f)))
		}
	}
	return dir
}

func TestWatch(t *testing.T) {
	cmd := start(t, "PROCTREE_TOUCH=48", "PROCTREE_CHILD=1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan uint64, 1)
	proctree.Tree{}.Watch(ctx, cmd.Process.Pid, false, func() uint64 { return 16 << 20 }, time.Millisecond, func(used uint64, err error) {
		assert.NoError(t, err)
		got <- used
	})
	select {
	case used := <-got:
		assert.Greater(t, used, uint64(16<<20))
	default:
		t.Fatal("Watch returned without calling over")
	}

	// Under the limit, it watches until ctx ends.
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		proctree.Tree{}.Watch(ctx, cmd.Process.Pid, true, func() uint64 { return 1 << 30 }, time.Millisecond, func(uint64, error) { t.Error("over called under the limit") })
	}()
	cancel()
	<-done
}
