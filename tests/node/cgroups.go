package node

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// cgroupDirs are the node's cgroup directories in every hierarchy.
func (n *Node) cgroupDirs() []string {
	var out []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, r := range roots {
		d := filepath.Join(r, n.CgroupRoot())
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// makeCgroups creates the node's cgroup in every hierarchy (kubelet wants
// its --cgroup-root to exist), with cpuset's CPUs and memory nodes copied
// from the root (a cgroup v1 cpuset starts empty).
func (n *Node) makeCgroups() error {
	roots, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, "cgroup.procs")); err != nil {
			continue // not a hierarchy
		}
		d := filepath.Join(r, n.CgroupRoot())
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(r, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

func (n *Node) killCgroups() {
	for _, d := range n.cgroupDirs() {
		_ = filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

func (n *Node) killShims() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		b, err := os.ReadFile(c)
		if err != nil || !bytes.Contains(b, []byte(n.dir+"/")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(c))); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	time.Sleep(200 * time.Millisecond)
}

// removeCgroups removes the node's cgroups, deepest first, waiting for the
// killed processes to leave them.
func (n *Node) removeCgroups() error {
	return harness.Poll(20*time.Second, 250*time.Millisecond, func() error {
		// A process that forked while the last round killed is killed now.
		n.killCgroups()
		var last error
		for _, d := range n.cgroupDirs() {
			var dirs []string
			_ = filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
					last = fmt.Errorf("%s: %w", dirs[i], err)
				}
			}
		}
		return last
	})
}

// leftovers lists what of the node still exists on the host.
func (n *Node) leftovers() []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		if b, err := os.ReadFile(c); err == nil && bytes.Contains(b, []byte(n.dir+"/")) {
			left = append(left, "process "+filepath.Base(filepath.Dir(c))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte(n.dir)) {
		left = append(left, "mounts under "+n.dir)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", n.netns)); err == nil {
		left = append(left, "network namespace "+n.netns)
	}
	if _, err := net.InterfaceByName(n.veth); err == nil {
		left = append(left, "interface "+n.veth)
	}
	for _, d := range n.cgroupDirs() {
		left = append(left, "cgroup "+d)
	}
	for k, v := range hostState() {
		if was := n.before[k]; was != v {
			left = append(left, fmt.Sprintf("%s changed from %s to %s", k, was, v))
		}
	}
	return left
}
