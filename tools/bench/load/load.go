// Package load sends a fixed number of calls at a fixed concurrency and
// summarizes their latencies. It measures; it asserts nothing.
package load

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// Call is one request; it returns an error for a failed call.
type Call func(ctx context.Context) error

// Stats summarize a run.
type Stats struct {
	Calls, Errors int
	// FirstError is the first failure seen, for the report.
	FirstError    error
	Wall          time.Duration
	P50, P90, P99 time.Duration
	Min, Max      time.Duration
	// PairedP50, from Interleaved only: the median over rounds of this
	// call's latency minus the first call's in the same round. Drift that
	// moves a whole round cancels out of each difference, so it is a
	// steadier "how much slower than the first" than P50 minus P50.
	PairedP50 time.Duration
}

// Throughput is calls per second over the run's wall time.
func (s Stats) Throughput() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(s.Calls) / s.Wall.Seconds()
}

func (s Stats) String() string {
	return fmt.Sprintf("n=%d errors=%d p50=%v p90=%v p99=%v throughput=%.1f/s", s.Calls, s.Errors,
		s.P50.Round(10*time.Microsecond), s.P90.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond), s.Throughput())
}

// Run makes n calls with at most concurrency in flight.
func Run(ctx context.Context, n, concurrency int, call Call) Stats {
	if concurrency < 1 {
		concurrency = 1
	}
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				errs[i] = call(ctx)
				lat[i] = time.Since(t)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return stats(lat, errs, time.Since(start))
}

// Paced runs n calls one at a time with pause between them, which is not
// counted: traffic that leaves the runner idle between calls, as porch
// rendering packages does.
func Paced(ctx context.Context, n int, pause time.Duration, call Call) Stats {
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		if i > 0 {
			time.Sleep(pause)
		}
		t := time.Now()
		errs[i] = call(ctx)
		lat[i] = time.Since(t)
	}
	return stats(lat, errs, time.Since(start))
}

// Interleaved makes n rounds of calls one at a time, each round one call of
// each, and summarizes each's. Scenarios compared this way share the
// machine's drift (other load, caches, frequency), which a run of one
// scenario after the other would count as their difference. Each round
// takes them in another order (the same from run to run), so what one
// leaves running in the background after its call (a helper started
// again) slows no one scenario's calls more than another's.
func Interleaved(ctx context.Context, n int, calls []Call) []Stats {
	lat := make([][]time.Duration, len(calls))
	errs := make([][]error, len(calls))
	wall := make([]time.Duration, len(calls))
	order := rand.New(rand.NewPCG(1, 2))
	for range n {
		for _, i := range order.Perm(len(calls)) {
			t := time.Now()
			err := calls[i](ctx)
			d := time.Since(t)
			lat[i], errs[i], wall[i] = append(lat[i], d), append(errs[i], err), wall[i]+d
		}
	}
	// The differences first: stats sorts each call's latencies in place.
	paired := make([]time.Duration, len(calls))
	for i := range calls {
		diffs := make([]time.Duration, n)
		for r := range n {
			diffs[r] = lat[i][r] - lat[0][r]
		}
		paired[i] = median(diffs)
	}
	s := make([]Stats, len(calls))
	for i := range calls {
		s[i] = stats(lat[i], errs[i], wall[i])
		s[i].PairedP50 = paired[i]
	}
	return s
}

// median sorts ds and returns its middle value (the upper of two).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func stats(lat []time.Duration, errs []error, wall time.Duration) Stats {
	n := len(lat)
	s := Stats{Calls: n, Wall: wall}
	for _, err := range errs {
		if err != nil {
			s.Errors++
			if s.FirstError == nil {
				s.FirstError = err
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n > 0 {
		pick := func(q float64) time.Duration { return lat[min(n-1, int(q*float64(n)))] }
		s.P50, s.P90, s.P99, s.Min, s.Max = pick(0.50), pick(0.90), pick(0.99), lat[0], lat[n-1]
	}
	return s
}

// Evaluate is a Call that sends one EvaluateFunction with its own deadline.
func Evaluate(client pb.FunctionEvaluatorClient, image string, input []byte, timeout time.Duration) Call {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: input})
		return err
	}
}
