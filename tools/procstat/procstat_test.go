package procstat

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnProcess(t *testing.T) {
	pid := os.Getpid()
	require.NoError(t, ResetPeak(pid))
	rss, err := RSS(pid)
	require.NoError(t, err, "RSS")
	require.Positive(t, rss, "RSS")
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	peak, err := PeakRSS(pid)
	assert.NoError(t, err, "PeakRSS")
	assert.GreaterOrEqual(t, peak, rss+(32<<20), "PeakRSS after touching 64 MiB")
	size, err := VirtualSize(pid)
	assert.NoError(t, err, "VirtualSize")
	assert.GreaterOrEqual(t, size, peak, "VirtualSize against PeakRSS")
	_ = buf[len(buf)-1]
	n, err := OpenFiles(pid)
	assert.NoError(t, err, "OpenFiles")
	assert.GreaterOrEqual(t, n, 3, "OpenFiles")
	exe, err := os.Executable()
	require.NoError(t, err)
	assert.Contains(t, Running(exe), pid, "Running(%s) does not list this process", exe)
}

func TestPeaks(t *testing.T) {
	read, err := Peaks(map[string]int{"me": os.Getpid()})
	require.NoError(t, err)
	got := read()
	require.Positive(t, got["me"], "Peaks read %v", got)
	_, err = Peaks(map[string]int{"gone": 1 << 30})
	require.Error(t, err, "Peaks of a process that does not exist succeeded")
}

func TestListFindsThisProcess(t *testing.T) {
	self := List(func(p Process) bool { return p.PID == os.Getpid() })
	require.Len(t, self, 1)
	assert.Equal(t, os.Getppid(), self[0].PPID)
	assert.Equal(t, os.Geteuid(), self[0].UID)
	assert.Contains(t, self[0].Cmdline, filepath.Base(os.Args[0]))
	assert.NotEmpty(t, self[0].PIDNamespace)
	assert.NotEqual(t, byte('Z'), self[0].State)
}

// CPUTime agrees with the kernel's other account of the same process,
// getrusage(RUSAGE_SELF), to its 10 ms unit (and the ticks each rounds).
func TestCPUTimeAgreesWithGetrusage(t *testing.T) {
	used := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for used() < 200*time.Millisecond {
		// use CPU until the kernel has counted some
	}
	got, err := CPUTime(os.Getpid())
	require.NoError(t, err)
	want := used()
	assert.InDelta(t, want.Seconds(), got.Seconds(), 0.05, "CPUTime %v, getrusage %v", got, want)
	_, err = CPUTime(1 << 30)
	require.Error(t, err, "CPUTime of a process that does not exist")
}
