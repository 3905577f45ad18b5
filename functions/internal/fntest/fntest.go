// Package fntest holds what the functions' limit tests share: they run
// small inputs that ask for far more work than their size through a
// function as the binary-runner does, in its own process admitted by its
// input's size, and bound what the run allocates and writes; and what the
// tests that compare a function with a release's answers share (Items).
//
// It is for tests only.
package fntest

import (
	"runtime"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/require"
)

// AllocatedSlack is what MaxAllocated allows a run beyond its share of its
// input, in bytes.
const AllocatedSlack = 16 << 20

// MaxAllocated bounds what a run may allocate, parsing its input included:
// 64 bytes for each byte of input (parsing alone takes about 30) and
// AllocatedSlack. A function that needs more states its own bound.
func MaxAllocated(input []byte) uint64 {
	return 64*uint64(len(input)) + AllocatedSlack
}

// HostileList is a ResourceList of config and items (YAML documents).
func HostileList(config string, items []string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nfunctionConfig:\n")
	b.WriteString(Indent(config, "  ", "  "))
	b.WriteString("items:\n")
	for _, it := range items {
		b.WriteString(Indent(it, "- ", "  "))
	}
	return []byte(b.String())
}

// Indent prefixes doc's first line with first and the others with rest.
func Indent(doc, first, rest string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
		if i == 0 {
			b.WriteString(first)
		} else {
			b.WriteString(rest)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// Many is the n items item makes of 0 to n-1.
func Many(n int, item func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = item(i)
	}
	return out
}

// Measure parses input and runs the function run on it, as the
// binary-runner does before it writes the output (which it bounds), logs
// and returns the bytes allocated, with the ResourceList run left and what
// run returned. The input must parse.
func Measure(t testing.TB, input []byte, run fn.ResourceListProcessorFunc) (allocated uint64, rl *fn.ResourceList, ok bool, err error) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rl, err = fn.ParseResourceList(input)
	require.NoError(t, err)
	ok, err = run(rl)
	runtime.ReadMemStats(&after)
	allocated = after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes of input: %d bytes allocated (%.1f times)", len(input), allocated, float64(allocated)/float64(len(input)))
	return allocated, rl, ok, err
}

// OutputSize is the size of rl's items as YAML.
func OutputSize(rl *fn.ResourceList) int {
	size := 0
	for _, o := range rl.Items {
		size += len(o.String())
	}
	return size
}
