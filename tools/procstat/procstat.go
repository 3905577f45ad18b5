// Package procstat reads what Linux's /proc says about a process: its peak
// and current resident memory, its open file descriptors, and whether it is
// still running. Benchmarks print these; load tests bound them.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PeakRSS is the process's peak resident set size (VmHWM) in bytes, since it
// started or since the last ResetPeak.
func PeakRSS(pid int) (int64, error) { return statusKB(pid, "VmHWM:") }

// RSS is the process's current resident set size (VmRSS) in bytes.
func RSS(pid int) (int64, error) { return statusKB(pid, "VmRSS:") }

// VirtualSize is the process's mapped address space (VmSize) in bytes, what
// RLIMIT_AS bounds.
func VirtualSize(pid int) (int64, error) { return statusKB(pid, "VmSize:") }

// ResetPeak starts PeakRSS over from the current RSS (clear_refs 5, Linux 4.0+).
func ResetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// Peaks resets the peak RSS of the named processes and returns a function
// that reads each one's peak since, in bytes; a process that can no longer
// be read is left out.
func Peaks(pids map[string]int) (func() map[string]int64, error) {
	for name, pid := range pids {
		if err := ResetPeak(pid); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return func() map[string]int64 {
		out := map[string]int64{}
		for name, pid := range pids {
			if v, err := PeakRSS(pid); err == nil {
				out[name] = v
			}
		}
		return out
	}, nil
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every architecture Linux runs Go on).
const userHZ = 100

// CPUTime is the CPU time the process's own threads have used, in user and
// kernel mode together (utime + stime; children it waited for are not
// counted), to 10 ms.
func CPUTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// utime is the 12th field after the command name, stime the 13th.
	fields := statFields(stat)
	if len(fields) < 13 {
		return 0, fmt.Errorf("pid %d: unexpected stat %q", pid, stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// OpenFiles counts the process's open file descriptors.
func OpenFiles(pid int) (int, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(entries), nil
}

// Running lists the pids of live (not zombie) processes whose executable is exe.
func Running(exe string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || target != exe {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if fields := statFields(stat); len(fields) > 0 && fields[0] == "Z" {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// Process is what /proc says of one process.
type Process struct {
	PID, PPID int
	// UID owns its /proc entry: its effective uid.
	UID int
	// State is its state letter (R, S, Z for a zombie, ...).
	State byte
	// Cmdline is its command line, arguments separated by spaces.
	Cmdline string
	// PIDNamespace names its pid namespace ("pid:[4026531836]").
	PIDNamespace string
}

// List lists the processes that keep accepts (nil: all).
func List(keep func(Process) bool) []Process {
	var out []Process
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue
		}
		// The state, then the parent.
		fields := statFields(stat)
		if len(fields) < 2 {
			continue
		}
		p := Process{PID: pid, State: fields[0][0]}
		p.PPID, _ = strconv.Atoi(fields[1])
		if fi, err := os.Stat(dir); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				p.UID = int(st.Uid)
			}
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		p.PIDNamespace, _ = os.Readlink(dir + "/ns/pid")
		if keep == nil || keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// statFields are the fields of a /proc/<pid>/stat after the command name,
// which is in parentheses and may hold spaces and parentheses itself: the
// state first, then the parent (none for a malformed stat).
func statFields(stat []byte) []string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

func statusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, field) {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, field))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("pid %d: unexpected %q", pid, line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: %q: %w", pid, line, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("pid %d: no %s in /proc/%d/status", pid, field, pid)
}
