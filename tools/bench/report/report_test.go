package report

import (
	"bytes"
	"image/png"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fnrunner/fnrunner/tools/bench/load"
)

func rows() []Row {
	var out []Row
	for _, ex := range []string{"bare exec", "go", "pod cold"} {
		for _, c := range []int{1, 8, 64} {
			out = append(out, Row{Input: "2 KiB", Function: "set-namespace", Executor: ex, Concurrency: c,
				Stats:   load.Stats{Calls: 10, P50: time.Duration(c) * time.Millisecond, P90: 2 * time.Millisecond, P99: 3 * time.Second, Wall: time.Second},
				PeakRSS: map[string]int64{"gateway": 40 << 20}})
		}
	}
	return out
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, rows()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+9 {
		t.Fatalf("%d lines, want header, rule and 9 rows:\n%s", len(lines), b.String())
	}
	want := "| set-namespace | 2 KiB | pod cold | 64 | 10 | 0 | 64ms | 2ms | 3s | 10.0/s | 40 MiB | - | - | - |"
	if lines[len(lines)-1] != want {
		t.Errorf("last row\n got %s\nwant %s", lines[len(lines)-1], want)
	}
	for _, l := range lines {
		if strings.Count(l, "|") != strings.Count(lines[0], "|") {
			t.Errorf("ragged row: %s", l)
		}
	}
}

func TestChartsArePNGs(t *testing.T) {
	files, err := Charts(t.TempDir(), rows())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || !strings.HasSuffix(files[0], "/set-namespace-2-kib.png") {
		t.Fatalf("files = %v, want one chart for the one scenario", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 300 {
		t.Errorf("chart is %v", b)
	}
}
