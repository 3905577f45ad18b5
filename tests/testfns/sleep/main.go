// Command sleep is the KRM function porch's e2e suites run as
// `sleep:latest`, which has no published source: it waits as long as its
// functionConfig says, then answers the ResourceList unchanged. The
// ConfigMap's data.sleepSeconds is whole seconds (TestPodEvaluatorSequential
// Parallel sends "5"), data.duration a Go duration (TestPodEvaluatorParallel
// Execution sends "3s"); with both, it waits for their sum. A value that
// does not parse fails the call with an error result.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
)

// maxSleep bounds the wait: the suites ask for seconds.
const maxSleep = 10 * time.Minute

func main() {
	if err := fn.AsMain(fn.ResourceListProcessorFunc(run)); err != nil {
		os.Exit(1)
	}
}

func run(rl *fn.ResourceList) (bool, error) {
	d, err := duration(rl.FunctionConfig)
	if err != nil {
		rl.Results.ErrorE(err)
		return false, nil
	}
	time.Sleep(d)
	rl.Results.Infof("slept %s", d)
	return true, nil
}

// duration is how long config says to wait.
func duration(config *fn.KubeObject) (time.Duration, error) {
	data, _, err := config.NestedStringMap("data")
	if err != nil {
		return 0, fmt.Errorf("functionConfig data: %w", err)
	}
	var d time.Duration
	if s, ok := data["sleepSeconds"]; ok {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("sleepSeconds %q: %w", s, err)
		}
		d += time.Duration(n) * time.Second
	}
	if s, ok := data["duration"]; ok {
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		if v < 0 {
			return 0, fmt.Errorf("duration %q: negative", s)
		}
		d += v
	}
	if d > maxSleep {
		return 0, fmt.Errorf("a wait of %s: more than %s", d, maxSleep)
	}
	return d, nil
}
