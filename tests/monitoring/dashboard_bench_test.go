package monitoring_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/bench/report"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

var (
	dashboardOut = flag.String("dashboard-out", "", "Directory for BenchmarkDashboard's picture (dashboard.png); "+
		"empty: $"+dashboardOutEnv+", else a new temporary directory, kept (its path is printed).")
	dashboardPhase = flag.Duration("dashboard-phase", 20*time.Second, "How long BenchmarkDashboard holds each concurrency level.")
)

// dashboardOutEnv names the directory for the picture when -dashboard-out
// is not given.
const dashboardOutEnv = "FNRUNNER_DASHBOARD_OUT"

// The bench traffic of BenchmarkDashboard.
var (
	// benchPanels are the panels drawn, by id in dashboard.json, in the
	// picture's order (two a row).
	benchPanels = []int{
		2,  // Calls/s by executor and code (gateway)
		3,  // Error ratio by service and executor
		4,  // Latency p50 and p99 by service and executor
		9,  // Admission queue wait p50 and p99 by service
		6,  // ResourceList bytes/s in and out by executor (gateway)
		23, // Executor table age by service
	}
	// benchLevels are the calls in flight of each phase, for each of the
	// two executors.
	benchLevels = []int{1, 4, 16, 4}
	// benchVariables are the dashboard's variables as Grafana opens it:
	// every function and executor (the variables' All value, ".*").
	// $__rate_interval is 10s: Grafana would take 4 scrape intervals, 4s;
	// 10s smooths the lines a little.
	benchVariables = variables{rateInterval: "10s", interval: "1s", function: ".*", executor: ".*"}
)

const (
	// benchInputSize is set-namespace's ResourceList: 16 ConfigMaps of
	// about 1 KiB, a small package.
	benchInputSize = 16 << 10
	// benchRunnerCapacity is the binary-runner's --max-in-flight-bytes,
	// small so that its admission queue shows: a go call of the input
	// weighs 40 × its bytes (about 660 KiB), a binary call 33 × its bytes
	// and 16 MiB for its process (about 16.5 MiB), so 20 MiB runs one
	// binary call beside up to five go calls, and from c=4 on the binary
	// calls queue for each other. (At the default, 512 MiB, no call of
	// this traffic waits and the panel is flat.)
	benchRunnerCapacity = 20 << 20
	// benchFailEvery is the period of the failing calls, sent all along.
	benchFailEvery = 500 * time.Millisecond
	// benchLeadIn and benchTail are the idle seconds drawn before and
	// after the load; the tail is shorter than the rate interval, so the
	// error ratio has calls to divide by up to the end.
	benchLeadIn, benchTail = 5 * time.Second, 8 * time.Second
)

// benchConfigs claim, besides monitoringConfigs' images, apply-replacements
// as a binary only: a failing call of it fails on the binary executor.
const benchConfigs = `apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: bench-replacements-binary
spec:
  image: ar-binary
  prefixes: [example.com/monitoring]
  binaryExecutor:
    tags: [v1]
    path: apply-replacements
`

// tableChange is a FunctionConfig added at the start of phase n: the
// executor table changes (a new version, its age back to 0).
func tableChange(n int) string {
	return fmt.Sprintf(`apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: bench-phase-%d
spec:
  image: phase-%d
  prefixes: [example.com/monitoring]
  binaryExecutor:
    tags: [v1]
    path: set-namespace
`, n, n)
}

// recorder keeps the latencies and codes of calls of one kind.
type recorder struct {
	mu    sync.Mutex
	lat   []time.Duration
	codes map[codes.Code]int
	first error
}

// wrap is call, recorded; done counts every answered call.
func (r *recorder) wrap(call load.Call, done *atomic.Int64) load.Call {
	return func(ctx context.Context) error {
		start := time.Now()
		err := call(ctx)
		d := time.Since(start)
		done.Add(1)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lat = append(r.lat, d)
		if r.codes == nil {
			r.codes = map[codes.Code]int{}
		}
		r.codes[status.Code(err)]++
		if err != nil && r.first == nil {
			r.first = err
		}
		return err
	}
}

// stats summarize the calls recorded over wall, as load.Run does.
func (r *recorder) stats(wall time.Duration) load.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat := append([]time.Duration(nil), r.lat...)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	s := load.Stats{Calls: len(lat), Wall: wall, FirstError: r.first}
	for c, n := range r.codes {
		if c != codes.OK {
			s.Errors += n
		}
	}
	if n := len(lat); n > 0 {
		pick := func(q float64) time.Duration { return lat[min(n-1, int(q*float64(n)))] }
		s.P50, s.P90, s.P99, s.Min, s.Max = pick(0.50), pick(0.90), pick(0.99), lat[0], lat[n-1]
	}
	return s
}

// codesText is the recorded codes, e.g. "NotFound=80 OK=2".
func (r *recorder) codesText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for c, n := range r.codes {
		parts = append(parts, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// BenchmarkDashboard draws the dashboard's main panels over real bench
// traffic into dashboard.png (-dashboard-out): the stack of
// TestDashboardAndAlertsOnRealMetrics, scraped every second by Prometheus,
// answers set-namespace on a 16 KiB ResourceList through the go and the
// binary executors, benchLevels calls in flight each, a level per
// -dashboard-phase, with a FunctionConfig added at each level change,
// while calls that fail (NotFound: an image no one claims, a binary the
// binary-runner has not; Internal: apply-replacements failing on its
// config, in each executor) go on at 2/s. Then benchPanels' queries, with
// the variables at All, are evaluated over the window by a range query and
// drawn. It prints the calls' own latencies and each series' mean over the
// second half of each phase, and asserts only that it could draw. Run it
// with tools/bazel run //tools/bench:dashboard -- -dashboard-out=$PWD/docs/bench.
func BenchmarkDashboard(b *testing.B) {
	dir := monitoringDir(b)
	prometheusBinary(b, "prometheus") // fail before starting anything
	out := *dashboardOut
	if out == "" {
		out = os.Getenv(dashboardOutEnv)
	}
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "dashboard-"); err != nil {
			b.Fatal(err)
		}
	}
	_, spec := readRules(b, dir)
	d, _ := readDashboard(b, dir)
	byID := map[int]panel{}
	for _, p := range d.allPanels() {
		byID[p.ID] = p
	}
	var panels []panel
	for _, id := range benchPanels {
		p, ok := byID[id]
		if !ok {
			b.Fatalf("dashboard.json has no panel %d", id)
		}
		panels = append(panels, p)
	}

	targets := map[string]string{}
	for _, job := range []string{"gateway", "binary-runner", "config-reconciler"} {
		address, err := localstack.FreeAddress()
		if err != nil {
			b.Fatal(err)
		}
		targets[job] = address
	}
	s := stack.Start(b, stack.Options{
		Configs:     map[string]string{"monitoring.yaml": monitoringConfigs, "bench.yaml": benchConfigs},
		GatewayArgs: []string{"--metrics-address=" + targets["gateway"]},
		BinaryRunnerArgs: []string{"--metrics-address=" + targets["binary-runner"],
			fmt.Sprintf("--max-in-flight-bytes=%d", benchRunnerCapacity)},
		ConfigReconcilerArgs: []string{"--metrics-address=" + targets["config-reconciler"]},
	})
	prom := startPrometheus(b, targets, writeRulesFile(b, spec, b.TempDir()))
	waitScraped(b, prom, s, targets, 0)
	time.Sleep(benchLeadIn)

	ctx := context.Background()
	client := s.Client()
	input := load.SetNamespaceInput(benchInputSize)
	var done atomic.Int64
	executors := []struct{ name, image string }{
		{"go", "set-namespace:v0.4.5"},
		{"binary", "example.com/monitoring/sn-binary:v1"},
	}
	failing := []struct {
		what, image string
		input       []byte
	}{
		{"NotFound: an image no one claims", "example.com/monitoring/unknown:v1", []byte(stack.Input)},
		{"Internal: apply-replacements failing (go)", "apply-replacements:v0.1.5", []byte(badReplacements)},
		{"NotFound: a claimed binary the binary-runner has not", "example.com/monitoring/missing:v1", []byte(stack.Input)},
		{"Internal: apply-replacements failing (binary)", "example.com/monitoring/ar-binary:v1", []byte(badReplacements)},
	}
	failed := make([]*recorder, len(failing))
	for i := range failed {
		failed[i] = &recorder{}
	}

	// The failing calls, all along.
	loadStart := time.Now()
	var failingCalls sync.WaitGroup
	stopFailing := make(chan struct{})
	failingDone := make(chan struct{})
	go func() {
		defer close(failingDone)
		tick := time.NewTicker(benchFailEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopFailing:
				return
			case <-tick.C:
			}
			f, rec := failing[i%len(failing)], failed[i%len(failing)]
			failingCalls.Add(1)
			go func() {
				defer failingCalls.Done()
				_ = rec.wrap(load.Evaluate(client, f.image, f.input, time.Minute), &done)(ctx)
			}()
		}
	}()

	// The phases, on the clock: each executor gets level callers, each
	// calling until the phase's end (load.Run sends a number of calls; a
	// phase is a time). The next phase starts on time, beside the last
	// calls of the one before, which end as they do.
	recs := make([][]*recorder, len(benchLevels))
	var callers sync.WaitGroup
	for n, level := range benchLevels {
		start := loadStart.Add(time.Duration(n) * *dashboardPhase)
		time.Sleep(time.Until(start))
		if n > 0 {
			if err := os.WriteFile(filepath.Join(s.ConfigDir, fmt.Sprintf("bench-phase-%d.yaml", n)), []byte(tableChange(n)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		end := start.Add(*dashboardPhase)
		for _, ex := range executors {
			rec := &recorder{}
			recs[n] = append(recs[n], rec)
			call := rec.wrap(load.Evaluate(client, ex.image, input, time.Minute), &done)
			for range level {
				callers.Add(1)
				go func() {
					defer callers.Done()
					for time.Now().Before(end) {
						_ = call(ctx)
					}
				}()
			}
		}
	}
	time.Sleep(time.Until(loadStart.Add(time.Duration(len(benchLevels)) * *dashboardPhase)))
	close(stopFailing)
	<-failingDone
	callers.Wait()
	failingCalls.Wait()
	loadEnd := time.Now()
	var rows []report.Row
	for n, level := range benchLevels {
		for i, ex := range executors {
			st := recs[n][i].stats(*dashboardPhase)
			rows = append(rows, report.Row{Input: "16 KiB", Function: "set-namespace", Executor: ex.name, Concurrency: level, Stats: st})
			if c := recs[n][i].codesText(); c != fmt.Sprintf("OK=%d", st.Calls) {
				fmt.Printf("phase %d, %s executor: codes %s; first error: %v\n", n+1, ex.name, c, st.FirstError)
			}
		}
	}

	// Everything answered is scraped, and the tail drawn.
	if err := harness.Poll(30*time.Second, 200*time.Millisecond, func() error {
		scraped, err := prom.scalar(`sum(fnrunner_evaluations_total{job="gateway"})`)
		if err == nil && scraped < float64(done.Load()) {
			err = fmt.Errorf("%v of %d calls", scraped, done.Load())
		}
		return err
	}); err != nil {
		fmt.Printf("the gateway's calls, scraped: %v\n", err)
	}
	time.Sleep(time.Until(loadEnd.Add(benchTail)))
	windowStart, windowEnd := loadStart.Add(-benchLeadIn), time.Now()

	fmt.Printf("\nBenchmarkDashboard, %s, %d CPUs: the calls as the client saw them, per phase\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU())
	var table strings.Builder
	if err := report.Markdown(&table, rows); err != nil {
		b.Fatal(err)
	}
	fmt.Println(table.String())
	for i, f := range failing {
		fmt.Printf("failing calls, %s: %s\n", f.what, failed[i].codesText())
	}

	// The panels over the window.
	fig := figure{
		title: "fnrunner dashboard (deploy/overlays/monitoring) over bench traffic",
		subtitle: fmt.Sprintf("set-namespace on a 16 KiB ResourceList through the go and the binary executor, %s calls in flight each (%s phases), "+
			"and 2 failing calls/s (NotFound, Internal)\n"+
			"tests/stack's services on loopback, binary-runner --max-in-flight-bytes=%d MiB; Prometheus scraping every 1 s; "+
			"variables: All, $__rate_interval = %s. %s, %d CPUs.",
			levelsText(), dashboardPhase.String(), benchRunnerCapacity>>20, benchVariables.rateInterval, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU()),
		xLabel: "seconds since the load began (dotted: next phase)",
		xMin:   -benchLeadIn.Seconds(),
		xMax:   windowEnd.Sub(loadStart).Seconds(),
	}
	for n := 1; n < len(benchLevels); n++ {
		fig.marks = append(fig.marks, (time.Duration(n) * *dashboardPhase).Seconds())
	}
	for _, p := range panels {
		c := chart{title: p.Title, unit: p.FieldConfig.Defaults.Unit}
		for ti, tg := range p.Targets {
			expr := expand(b, tg.Expr, benchVariables)
			series, err := prom.queryRange(expr, windowStart, windowEnd, time.Second)
			if err != nil {
				b.Fatalf("panel %d %q %s: %v", p.ID, p.Title, tg.RefID, err)
			}
			var lines []chartLine
			for _, sr := range series {
				l := chartLine{legend: legendText(tg.LegendFormat, sr.Metric), key: labelKey(sr.Metric), dashed: ti > 0}
				for i, at := range sr.Times {
					l.x = append(l.x, at.Sub(loadStart).Seconds())
					l.y = append(l.y, sr.Values[i])
				}
				lines = append(lines, l)
			}
			sort.Slice(lines, func(i, j int) bool { return lines[i].legend < lines[j].legend })
			c.lines = append(c.lines, lines...)
		}
		fig.charts = append(fig.charts, c)
	}
	path := filepath.Join(out, "dashboard.png")
	if err := fig.save(path); err != nil {
		b.Fatal(err)
	}
	printPhaseMeans(fig)
	fmt.Printf("\nwrote %s\n", path)
}

// levelsText is benchLevels as "1, 4, 16, 4".
func levelsText() string {
	parts := make([]string, len(benchLevels))
	for i, l := range benchLevels {
		parts[i] = fmt.Sprint(l)
	}
	return strings.Join(parts, ", ")
}

// printPhaseMeans prints each series' mean over the second half of each
// phase (the rates settled), in its chart's axis unit.
func printPhaseMeans(f figure) {
	phase := dashboardPhase.Seconds()
	var b strings.Builder
	b.WriteString("\nThe panels' series: mean over the second half of each phase\n\n| panel | series | unit |")
	for n, l := range benchLevels {
		fmt.Fprintf(&b, " phase %d (c=%d) |", n+1, l)
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", len(benchLevels)) + "\n")
	for _, c := range f.charts {
		factor, unit := axisUnit(c.unit, c.maxValue())
		for _, l := range c.lines {
			fmt.Fprintf(&b, "| %s | %s | %s |", c.title, l.legend, unit)
			for n := range benchLevels {
				from, to := (float64(n)+0.5)*phase, float64(n+1)*phase
				sum, k := 0.0, 0
				for i, x := range l.x {
					if x >= from && x <= to && !math.IsNaN(l.y[i]) && !math.IsInf(l.y[i], 0) {
						sum += l.y[i]
						k++
					}
				}
				if k == 0 {
					b.WriteString(" - |")
					continue
				}
				fmt.Fprintf(&b, " %.3g |", sum/float64(k)*factor)
			}
			b.WriteString("\n")
		}
	}
	fmt.Print(b.String())
}
