package report

import (
	"bytes"
	"image/png"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, Markdown(&b, rows()))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2+9, "want header, rule and 9 rows:\n%s", b.String())
	want := "| set-namespace | 2 KiB | pod cold | 64 | 10 | 0 | 64ms | 2ms | 3s | 10.0/s | 40 MiB | - | - | - |"
	assert.Equal(t, want, lines[len(lines)-1], "last row")
	for _, l := range lines {
		assert.Equal(t, strings.Count(lines[0], "|"), strings.Count(l, "|"), "ragged row: %s", l)
	}
}

func TestChartsArePNGs(t *testing.T) {
	files, err := Charts(t.TempDir(), rows())
	require.NoError(t, err)
	require.Len(t, files, 1, "want one chart for the one scenario")
	require.True(t, strings.HasSuffix(files[0], "/set-namespace-2-kib.png"), "files = %v, want one chart for the one scenario", files)
	f, err := os.Open(files[0])
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	b := img.Bounds()
	assert.GreaterOrEqual(t, b.Dx(), 400, "chart is %v", b)
	assert.GreaterOrEqual(t, b.Dy(), 300, "chart is %v", b)
}
