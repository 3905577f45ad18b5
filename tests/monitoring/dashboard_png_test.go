package monitoring_test

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// A picture of dashboard panels. Grafana is not packaged here, so
// BenchmarkDashboard draws the panels' query results with the bench's
// plotting library (gonum.org/v1/plot, as tools/bench/report does): a grid
// of time-series charts, each titled like its panel, its y axis in the
// panel's unit, a line per series named by the panel's legend format, the
// legend under the chart so that it covers no data.

// figure is the whole picture.
type figure struct {
	title, subtitle string
	// xLabel names the x axis, shared by every chart; x is in seconds.
	xLabel     string
	xMin, xMax float64
	// marks are x values drawn as dotted vertical lines (phase changes).
	marks  []float64
	charts []chart
}

// chart is one panel.
type chart struct {
	title string
	// unit is the panel's Grafana unit (fieldConfig.defaults.unit).
	unit  string
	lines []chartLine
}

// chartLine is one series.
type chartLine struct {
	legend string
	// key is the series' label set: series of one chart with the same
	// labels (a service's p50 and p99, an executor's bytes in and out)
	// get the same colour.
	key string
	// dashed: the series of the panel's second query and later (p50 after
	// p99, out after in).
	dashed bool
	x, y   []float64
}

// axisUnit is how a chart's y axis shows a Grafana unit, given the largest
// value: the factor values are multiplied by and the axis label.
func axisUnit(unit string, max float64) (float64, string) {
	switch unit {
	case "reqps":
		return 1, "calls/s"
	case "percentunit":
		return 100, "%"
	case "s":
		if max < 1 {
			return 1000, "ms"
		}
		return 1, "s"
	case "Bps":
		switch {
		case max >= 1<<20:
			return 1.0 / (1 << 20), "MiB/s"
		case max >= 1<<10:
			return 1.0 / (1 << 10), "KiB/s"
		}
		return 1, "bytes/s"
	}
	return 1, ""
}

// maxValue is the largest finite value of the chart's series (0 if none).
func (c chart) maxValue() float64 {
	m := 0.0
	for _, l := range c.lines {
		for _, v := range l.y {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				m = math.Max(m, v)
			}
		}
	}
	return m
}

// Colours of the series (matplotlib's tab10) and of the marks.
var (
	seriesColors = []color.Color{
		color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
		color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
		color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
		color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
		color.RGBA{0xbc, 0xbd, 0x22, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	}
	markColor = color.RGBA{0x99, 0x99, 0x99, 0xff}
	gridColor = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
)

// Layout, in points unless said otherwise.
const (
	figureCols   = 2
	figureWidth  = 16 * vg.Inch
	chartHeight  = 3.6 * vg.Inch
	headerHeight = 0.95 * vg.Inch
	figureDPI    = 100
	legendFont   = 9
	legendCols   = 2
	// legendPadding is the space between legend entries.
	legendPadding = 2.5
	// legendIndent puts the legend under the chart's data, right of the
	// y axis.
	legendIndent = 0.55 * vg.Inch
)

// save draws the figure as a PNG at path.
func (f figure) save(path string) error {
	if len(f.charts) == 0 {
		return fmt.Errorf("no charts")
	}
	rows := (len(f.charts) + figureCols - 1) / figureCols
	legendRows := 0
	for _, c := range f.charts {
		legendRows = max(legendRows, (len(c.lines)+legendCols-1)/legendCols)
	}
	entryHeight := vg.Length(legendFont)*1.3 + legendPadding
	legendHeight := vg.Length(legendRows)*entryHeight + 10
	cellHeight := chartHeight + legendHeight
	height := headerHeight + vg.Length(rows)*cellHeight

	img := vgimg.NewWith(vgimg.UseWH(figureWidth, height), vgimg.UseDPI(figureDPI))
	dc := draw.New(img)

	title := plotText(16, draw.XCenter)
	dc.FillText(title, vg.Point{X: figureWidth / 2, Y: height - 0.3*vg.Inch}, f.title)
	sub := plotText(10, draw.XCenter)
	sub.YAlign = draw.YTop
	dc.FillText(sub, vg.Point{X: figureWidth / 2, Y: height - 0.45*vg.Inch}, f.subtitle)

	body := dc
	body.Max.Y -= headerHeight
	tiles := draw.Tiles{Rows: rows, Cols: figureCols, PadLeft: 8, PadRight: 12, PadX: 24, PadBottom: 4}
	for i, c := range f.charts {
		cell := tiles.At(body, i%figureCols, i/figureCols)
		chartArea, legendArea := cell, cell
		chartArea.Min.Y += legendHeight
		legendArea.Max.Y = legendArea.Min.Y + legendHeight - 4
		legendArea.Min.X += legendIndent
		p, styles, err := f.plot(c)
		if err != nil {
			return fmt.Errorf("chart %q: %w", c.title, err)
		}
		p.Draw(chartArea)
		drawLegend(legendArea, c, styles)
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// plotText is a text style of the plot's font.
func plotText(size vg.Length, align draw.XAlignment) draw.TextStyle {
	return draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, size),
		Handler: plot.DefaultTextHandler, XAlign: align}
}

// plot is one chart's plot, and each series' line style.
func (f figure) plot(c chart) (*plot.Plot, []draw.LineStyle, error) {
	factor, unit := axisUnit(c.unit, c.maxValue())
	p := plot.New()
	p.Title.Text = c.title
	p.Title.TextStyle.Font.Size = 12
	p.Title.Padding = 6
	p.X.Label.Text = f.xLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = 10
		a.Tick.Label.Font.Size = 9
	}
	p.X.Tick.Marker = secondsTicks{}
	bottom, top := 0.0, niceCeil(c.maxValue()*factor*1.05)
	p.Y.Tick.Marker = plainTicks{}
	p.Y.Label.Text = unit
	logScale := false
	// Latencies and rates spread over decades (a go call's milliseconds, a
	// binary's seconds; the go executor's hundreds of calls/s, the failures'
	// one or two): a log scale shows them all, down to 10⁻⁴ of the top.
	if low := c.minPositive() * factor; (c.unit == "s" || c.unit == "reqps") && low > 0 && top/low > 100 {
		top = math.Pow(10, math.Ceil(math.Log10(c.maxValue()*factor)))
		bottom = math.Max(math.Pow(10, math.Floor(math.Log10(low))), top/1e4)
		logScale = true
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = decadeTicks{}
		p.Y.Label.Text = unit + ", log scale"
	}
	p.X.Min, p.X.Max = f.xMin, f.xMax
	p.Y.Min, p.Y.Max = bottom, top

	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal.Color = gridColor
	p.Add(grid)
	for _, m := range f.marks {
		l, err := plotter.NewLine(plotter.XYs{{X: m, Y: bottom}, {X: m, Y: top}})
		if err != nil {
			return nil, nil, err
		}
		l.Color = markColor
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		p.Add(l)
	}

	// Values a line's width apart: a hundredth of the axis.
	near := func(u, v float64) bool { return math.Abs(u-v)*factor <= (top-bottom)/100 }
	if logScale {
		near = func(u, v float64) bool { return math.Abs(u-v) <= math.Max(math.Abs(u), math.Abs(v))/50 }
	}
	colors := colorIndex(c.lines)
	styles := make([]draw.LineStyle, len(c.lines))
	for i, s := range c.lines {
		// A line that another one drawn later covers (the same values) is
		// wider, to show beside it.
		covered := 0
		for _, o := range c.lines[i+1:] {
			if coincide(s, o, near) {
				covered++
			}
		}
		sty := draw.LineStyle{Color: seriesColors[colors[s.key]%len(seriesColors)], Width: vg.Points(1.6 + 1.6*float64(covered))}
		if s.dashed {
			sty.Dashes = []vg.Length{vg.Points(5), vg.Points(2.5)}
		}
		styles[i] = sty
		for _, seg := range segments(s.x, s.y, factor, bottom) {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return nil, nil, err
			}
			l.LineStyle = sty
			p.Add(l)
		}
	}
	// Axis ranges as set above, whatever the plotters' data ranges.
	p.X.Min, p.X.Max = f.xMin, f.xMax
	p.Y.Min, p.Y.Max = bottom, top
	return p, styles, nil
}

// minPositive is the smallest finite value above 0 of the chart's series
// (0 if none).
func (c chart) minPositive() float64 {
	m := math.Inf(1)
	for _, l := range c.lines {
		for _, v := range l.y {
			if v > 0 && !math.IsInf(v, 0) {
				m = math.Min(m, v)
			}
		}
	}
	if math.IsInf(m, 1) {
		return 0
	}
	return m
}

// coincide reports whether two series are near each other at nine in ten
// of the times both have a value.
func coincide(a, b chartLine, near func(u, v float64) bool) bool {
	at := map[float64]float64{}
	for i, x := range a.x {
		at[x] = a.y[i]
	}
	both, n := 0, 0
	for i, x := range b.x {
		v, ok := at[x]
		if !ok || math.IsNaN(v) || math.IsNaN(b.y[i]) {
			continue
		}
		both++
		if near(v, b.y[i]) {
			n++
		}
	}
	return both > 0 && n*10 >= both*9
}

// decadeTicks mark a log axis: every power of ten, labelled, and its
// multiples 2 to 9 between.
type decadeTicks struct{}

func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		p := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * p
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// plainTicks are plot.DefaultTicks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		if t.Label != "" {
			v, _ := strconv.ParseFloat(strconv.FormatFloat(t.Value, 'g', 6, 64), 64)
			ticks[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ticks
}

// drawLegend writes the chart's legend in columns, filled column by
// column: a panel's first query's series, then its second's.
func drawLegend(c draw.Canvas, ch chart, styles []draw.LineStyle) {
	if len(ch.lines) == 0 {
		return
	}
	rows := (len(ch.lines) + legendCols - 1) / legendCols
	width := (c.Max.X - c.Min.X) / legendCols
	for col := 0; col*rows < len(ch.lines); col++ {
		l := plot.NewLegend()
		l.TextStyle.Font.Size = legendFont
		l.Top, l.Left = true, true
		l.ThumbnailWidth = vg.Points(24)
		l.Padding = legendPadding
		for i := col * rows; i < min((col+1)*rows, len(ch.lines)); i++ {
			l.Add(ch.lines[i].legend, &plotter.Line{LineStyle: styles[i]})
		}
		area := c
		area.Min.X = c.Min.X + vg.Length(col)*width
		area.Max.X = area.Min.X + width
		l.Draw(area)
	}
}

// colorIndex numbers the lines' label sets in order.
func colorIndex(lines []chartLine) map[string]int {
	var keys []string
	seen := map[string]bool{}
	for _, l := range lines {
		if !seen[l.key] {
			seen[l.key] = true
			keys = append(keys, l.key)
		}
	}
	sort.Strings(keys)
	out := map[string]int{}
	for i, k := range keys {
		out[k] = i
	}
	return out
}

// segments are the runs of finite values of a series, scaled by factor: a
// NaN (0/0, e.g. an error ratio with no calls) breaks the line, as in
// Grafana, and so does a value below bottom (0 on a log scale).
func segments(x, y []float64, factor, bottom float64) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i := range x {
		if math.IsNaN(y[i]) || math.IsInf(y[i], 0) || y[i]*factor < bottom {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, plotter.XY{X: x[i], Y: y[i] * factor})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// niceCeil is the smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a
// power of ten at or above v (1 for v <= 0): the top of a y axis.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// secondsTicks mark the time axis: a labelled tick every 1, 2 or 5 times
// a power of ten seconds, ten or fewer over the axis, and one between.
type secondsTicks struct{}

func (secondsTicks) Ticks(min, max float64) []plot.Tick {
	step := math.Pow(10, math.Floor(math.Log10((max-min)/10)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (max-min)/(m*step) <= 10 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for i := math.Ceil(min / step * 2); i/2*step <= max; i++ {
		t := plot.Tick{Value: i / 2 * step}
		if t.Value == 0 {
			t.Value = 0 // not -0
		}
		if math.Mod(i, 2) == 0 {
			t.Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// legendText is a panel's legendFormat with the series' labels put in
// ({{job}} → gateway), as Grafana shows it; without a format, the labels.
func legendText(format string, metric map[string]string) string {
	if format == "" {
		return labelKey(metric)
	}
	var b strings.Builder
	for {
		i := strings.Index(format, "{{")
		if i < 0 {
			b.WriteString(format)
			break
		}
		j := strings.Index(format[i:], "}}")
		if j < 0 {
			b.WriteString(format)
			break
		}
		b.WriteString(format[:i])
		b.WriteString(metric[strings.TrimSpace(format[i+2:i+j])])
		format = format[i+j+2:]
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// labelKey is a label set as text, sorted by name.
func labelKey(metric map[string]string) string {
	names := make([]string, 0, len(metric))
	for n := range metric {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + metric[n]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func TestLegendText(t *testing.T) {
	m := map[string]string{"job": "gateway", "executor": "go"}
	assert.Equal(t, "p99 gateway go", legendText("p99 {{job}} {{ executor }}", m))
	assert.Equal(t, "in", legendText("in {{instance}}", m), "a label the series has not")
	assert.Equal(t, "{executor=go, job=gateway}", legendText("", m))
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.7: 0.8, 1: 1, 1.01: 1.2, 230: 250, 4100: 5000} {
		assert.InDelta(t, want, niceCeil(v), want*1e-9, "niceCeil(%v)", v)
	}
}

// A figure draws: linear and log charts, a series with a gap (NaN), one
// with no data.
func TestFigureSaves(t *testing.T) {
	x := []float64{0, 1, 2, 3, 4}
	f := figure{title: "title", subtitle: "one\ntwo", xLabel: "s", xMin: -1, xMax: 5, marks: []float64{2},
		charts: []chart{
			{title: "calls", unit: "reqps", lines: []chartLine{
				{legend: "go OK", key: "a", x: x, y: []float64{100, 200, 300, 200, 100}},
				{legend: "go Internal", key: "b", x: x, y: []float64{0.5, 0.4, 0, 0.5, 0.5}},
			}},
			{title: "ratio", unit: "percentunit", lines: []chartLine{
				{legend: "gateway go", key: "a", x: x, y: []float64{math.NaN(), 0.1, 0.2, math.NaN(), 0.1}},
			}},
			{title: "latency", unit: "s", lines: []chartLine{
				{legend: "p99", key: "a", x: x, y: []float64{0.01, 0.02, 2, 3, 0.01}},
				{legend: "p50", key: "a", dashed: true, x: x, y: []float64{0.003, 0.004, 0.5, 1, 0.003}},
			}},
			{title: "empty", unit: "Bps"},
		}}
	path := filepath.Join(t.TempDir(), "sub", "dashboard.png")
	require.NoError(t, f.save(path))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "\x89PNG"), "not a PNG")
}

func TestSecondsTicks(t *testing.T) {
	var labels []string
	for _, tk := range (secondsTicks{}).Ticks(-5, 88) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	assert.Equal(t, []string{"0", "10", "20", "30", "40", "50", "60", "70", "80"}, labels)
	labels = nil
	for _, tk := range (secondsTicks{}).Ticks(-1, 5) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	assert.Equal(t, []string{"-1", "0", "1", "2", "3", "4", "5"}, labels)
}
