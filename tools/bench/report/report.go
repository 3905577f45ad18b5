// Package report turns benchmark results into a markdown table and a PNG
// chart per scenario. It formats; it measures nothing.
package report

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fnrunner/fnrunner/tools/bench/load"
)

// Services whose peak RSS a row may carry, in column order.
var Services = []string{"gateway", "config-reconciler", "binary-runner", "pod-manager"}

// Row is one measured scenario at one concurrency.
type Row struct {
	// Input names the ResourceList ("2 KiB"), Function the function
	// ("set-namespace"), Executor the path ("go", "binary", "pod warm",
	// "pod cold", "bare exec").
	Input, Function, Executor string
	Concurrency               int
	Stats                     load.Stats
	// PeakRSS of each service during the row, in bytes, by service name.
	PeakRSS map[string]int64
}

// Scenario is what a chart is drawn for: one input and one function.
func (r Row) Scenario() string { return r.Function + ", " + r.Input }

// Markdown writes the rows as a table.
func Markdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| function | input | executor | c | n | errors | p50 | p90 | p99 | throughput |")
	for _, s := range Services {
		fmt.Fprintf(&b, " %s peak RSS |", s)
	}
	b.WriteString("\n|---|---|---|---|---|---|---|---|---|---|")
	b.WriteString(strings.Repeat("---|", len(Services)))
	b.WriteString("\n")
	for _, r := range rows {
		s := r.Stats
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %s | %s | %s | %.1f/s |", r.Function, r.Input, r.Executor, r.Concurrency,
			s.Calls, s.Errors, duration(s.P50), duration(s.P90), duration(s.P99), s.Throughput())
		for _, svc := range Services {
			if v, ok := r.PeakRSS[svc]; ok {
				fmt.Fprintf(&b, " %s |", MiB(v))
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// MiB formats a byte count.
func MiB(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func duration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// FileName is the chart file of a scenario.
func FileName(scenario string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(scenario) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteRune('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-") + ".png"
}

// Charts draws one PNG per scenario into dir: p50 latency (log scale) by
// concurrency, a line per executor. It returns the files written.
func Charts(dir string, rows []Row) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	byScenario := map[string][]Row{}
	var scenarios []string
	for _, r := range rows {
		if _, ok := byScenario[r.Scenario()]; !ok {
			scenarios = append(scenarios, r.Scenario())
		}
		byScenario[r.Scenario()] = append(byScenario[r.Scenario()], r)
	}
	var files []string
	for _, sc := range scenarios {
		path := filepath.Join(dir, FileName(sc))
		if err := chart(path, sc, byScenario[sc]); err != nil {
			return files, fmt.Errorf("chart %q: %w", sc, err)
		}
		files = append(files, path)
	}
	return files, nil
}

func chart(path, title string, rows []Row) error {
	p := plot.New()
	p.Title.Text = title + ": p50 latency by concurrency"
	p.X.Label.Text = "calls in flight"
	p.Y.Label.Text = "p50 latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(concurrencyTicks(rows))
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	byExecutor := map[string]plotter.XYs{}
	var executors []string
	for _, r := range rows {
		if r.Stats.P50 <= 0 {
			continue
		}
		if _, ok := byExecutor[r.Executor]; !ok {
			executors = append(executors, r.Executor)
		}
		byExecutor[r.Executor] = append(byExecutor[r.Executor], plotter.XY{X: float64(r.Concurrency), Y: float64(r.Stats.P50) / float64(time.Millisecond)})
	}
	for i, ex := range executors {
		xys := byExecutor[ex]
		sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := palette[i%len(palette)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(2)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(ex, line, points)
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func concurrencyTicks(rows []Row) []plot.Tick {
	seen := map[int]bool{}
	var ticks []plot.Tick
	for _, r := range rows {
		if !seen[r.Concurrency] {
			seen[r.Concurrency] = true
			ticks = append(ticks, plot.Tick{Value: float64(r.Concurrency), Label: fmt.Sprint(r.Concurrency)})
		}
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Value < ticks[j].Value })
	return ticks
}

var palette = []color.Color{
	color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 0xff}, // bare exec: the floor
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	// Enough for the matrix's eleven executors (the sandbox layer sets).
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

// Machine describes the CPU the numbers come from.
func Machine() string {
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs", cpu, runtime.NumCPU())
}
