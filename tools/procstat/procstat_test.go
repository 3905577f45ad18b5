package procstat

import (
	"os"
	"testing"
)

func TestOwnProcess(t *testing.T) {
	pid := os.Getpid()
	if err := ResetPeak(pid); err != nil {
		t.Fatal(err)
	}
	rss, err := RSS(pid)
	if err != nil || rss <= 0 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	peak, err := PeakRSS(pid)
	if err != nil || peak < rss+(32<<20) {
		t.Errorf("PeakRSS = %d, %v; want at least %d after touching 64 MiB", peak, err, rss+(32<<20))
	}
	_ = buf[len(buf)-1]
	n, err := OpenFiles(pid)
	if err != nil || n < 3 {
		t.Errorf("OpenFiles = %d, %v", n, err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range Running(exe) {
		found = found || p == pid
	}
	if !found {
		t.Errorf("Running(%s) does not list this process", exe)
	}
}

func TestPeaks(t *testing.T) {
	read, err := Peaks(map[string]int{"me": os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(); got["me"] <= 0 {
		t.Fatalf("Peaks read %v", got)
	}
	if _, err := Peaks(map[string]int{"gone": 1 << 30}); err == nil {
		t.Fatal("Peaks of a process that does not exist succeeded")
	}
}
