package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/services/binary-runner/runner"
	"github.com/fnrunner/fnrunner/tools/bench/load"
)

// The shipped budget still admits the throughput floor: 8 binary calls of 2
// KiB at once, or 2 of 3 MiB (tools/bench's inputs), each weighed with its
// process; and it fits deploy/'s 1 GiB with what the transport holds.
func TestShippedBudgetAdmitsTheThroughputFloor(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	limiter := o.admission.Limiter()
	for _, tt := range []struct {
		size, calls int
	}{{2 << 10, 8}, {3 << 20, 2}} {
		w := runner.Weight(evalwire.Bytes(load.SetNamespaceInput(tt.size)), runner.ProcessWeight)
		var releases []func()
		for i := range tt.calls {
			release, ok := limiter.TryAcquire(w)
			require.True(t, ok, "call %d of %d of %d bytes (weight %d MiB) not admitted", i+1, tt.calls, tt.size, w>>20)
			releases = append(releases, release)
		}
		for _, r := range releases {
			r()
		}
	}
	assert.NoError(t, o.admission.Fit(1<<30, true, o.common.Held(o.maxRequestBodySize)+admission.RuntimeHeadroom))
}
