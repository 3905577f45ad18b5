package runner

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/fnresult"
)

// writeResourceList writes what rl.ToYAML returns, document by document.
func TestWriteResourceListIsToYAML(t *testing.T) {
	manyResults := "results:\n"
	for i := 0; i < 2*resultsPerDocument+3; i++ {
		manyResults += fmt.Sprintf("- message: result %d\n  severity: info\n  field: {path: spec.x}\n  file: {path: f%d.yaml, index: %d}\n", i, i, i)
	}
	tests := []struct {
		name string
		rl   string
	}{{
		name: "nothing",
		rl:   "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n",
	}, {
		name: "empty items",
		rl:   "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n",
	}, {
		name: "items sorted, functionConfig and results",
		rl: `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: Service
  metadata:
    name: b
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: a
  spec:
    template:
      spec:
        containers: [{name: x, image: "nginx:1"}]
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: fc
  data:
    k: v
results:
- message: hello
  severity: error
  resourceRef: {apiVersion: v1, kind: Service, name: b}
  field: {path: metadata.name, currentValue: b, proposedValue: c}
  file: {path: svc.yaml, index: 1}
  tags: {a: b}
`,
	}, {
		name: "comments everywhere",
		rl: `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
# before the first item
- # on the first item
  apiVersion: v1 # line
  kind: ConfigMap
  # head of metadata
  metadata:
    name: a
    annotations:
      config.kubernetes.io/path: a.yaml
  data:
    # in data
    x: |
      literal

      with an empty line
    y: >
      folded
      text
    z: "quoted # not a comment"
  # foot of the first item
# between items
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: b} # flow
  data:
    list:
    - a # one
    # two
    - b
    nested:
    - - x
      - y
    - []
    - {}
# after the items
functionConfig:
  # head in the config
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: fc
  data:
    k: v # line
  # foot of the config
`,
	}, {
		name: "anchors, long keys and odd scalars",
		rl: `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: odd
    labels: &labels
      a: b
  data:
    ` + strings.Repeat("k", 200) + `: long key
    copy: *labels
    empty: ""
    null-value:
    tilde: ~
    number: 1
    float: 1.50
    bool: yes
    unicode: "héllo ✓"
    tab: "a\tb"
    multi: "line one\nline two\n"
    spaces: "  leading and trailing  "
    colon: "a: b"
    dash: "- x"
`,
	}, {
		name: "results in batches",
		rl:   "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- {apiVersion: v1, kind: A, metadata: {name: a}}\n" + manyResults,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := parseResourceList(t, tt.rl).ToYAML()
			require.NoError(t, err)
			var got bytes.Buffer
			require.NoError(t, writeResourceList(&got, parseResourceList(t, tt.rl)))
			assert.Equal(t, string(want), got.String())
		})
	}
}

func parseResourceList(t *testing.T, s string) *fn.ResourceList {
	t.Helper()
	rl, err := fn.ParseResourceList([]byte(s))
	require.NoError(t, err)
	return rl
}

// A run whose output exceeds the limit stops being serialized there: what
// it allocates does not grow with what its output would have been.
func TestInProcessOutputLimit(t *testing.T) {
	const limit = 1 << 20
	// items appends n ConfigMaps of size bytes each, sharing one string, so
	// that the function itself allocates little.
	items := func(n, size int, ok bool, err error) fn.ResourceListProcessorFunc {
		value := strings.Repeat("x", size)
		return func(rl *fn.ResourceList) (bool, error) {
			for i := 0; i < n; i++ {
				o := fn.NewEmptyKubeObject()
				if err := errors.Join(o.SetAPIVersion("v1"), o.SetKind("ConfigMap"), o.SetName(fmt.Sprint("cm", i)), o.SetNestedString(value, "data", "big")); err != nil {
					return false, err
				}
				rl.Items = append(rl.Items, o)
			}
			return ok, err
		}
	}
	tests := []struct {
		name     string
		process  fn.ResourceListProcessorFunc
		limit    int
		wantErr  error // errors.Is; nil: success
		exitCode int
		wantLog  string
		output   bool // the output is returned, whole or what fitted
	}{{
		name:    "within the limit",
		process: items(10, 1<<10, true, nil),
		limit:   limit,
		output:  true,
	}, {
		name:    "no limit",
		process: items(10, 1<<10, true, nil),
		output:  true,
	}, {
		name:    "a GiB of output",
		process: items(1024, 1<<20, true, nil),
		limit:   limit,
		wantErr: fnresult.ErrOutputTooLarge,
		output:  true,
	}, {
		name:    "a GiB of output in many items",
		process: items(1<<12, 1<<18, true, nil),
		limit:   limit,
		wantErr: fnresult.ErrOutputTooLarge,
		output:  true,
	}, {
		name:     "a failed run within the limit",
		process:  items(10, 1<<10, false, nil),
		limit:    limit,
		wantErr:  &fnresult.ExitError{},
		exitCode: 1,
		wantLog:  "failed to evaluate function: error: function failure",
		output:   true,
	}, {
		name:     "a failed run that says its log",
		process:  items(10, 1<<10, false, releaseLog("[error] : substring must not be empty")),
		limit:    limit,
		wantErr:  &fnresult.ExitError{},
		exitCode: 1,
		wantLog:  "[error] : substring must not be empty",
		output:   true,
	}, {
		name:     "a failed run over the limit",
		process:  items(1024, 1<<20, false, errors.New("boom")),
		limit:    limit,
		wantErr:  &fnresult.ExitError{},
		exitCode: 1,
		wantLog:  "failed to evaluate function: boom\noutput dropped: over the 1048576-byte limit\n",
	}, {
		name:     "a panic",
		process:  func(*fn.ResourceList) (bool, error) { panic("kaboom") },
		limit:    limit,
		wantErr:  &fnresult.ExitError{},
		exitCode: 2,
		wantLog:  "panic: kaboom",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := runInProcess(tt.process, []byte(rl), tt.limit)
			runtime.ReadMemStats(&after)
			// The function's own objects (a few KiB each) and at most the
			// limit's worth of output, encoded an item at a time; fn.Run
			// allocated five times the whole output (over 5 GiB here).
			assert.LessOrEqual(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "bytes allocated")
			require.NotNil(t, res)
			assert.Equal(t, tt.exitCode, res.ExitCode)
			assert.Contains(t, string(res.Log), tt.wantLog)
			if tt.limit > 0 {
				assert.LessOrEqual(t, res.ResourceList.Len(), tt.limit)
			}
			switch want := tt.wantErr.(type) {
			case nil:
				require.NoError(t, err)
			case *fnresult.ExitError:
				var xe *fnresult.ExitError
				require.ErrorAs(t, err, &xe)
				assert.Same(t, res, xe.Result)
			default:
				require.ErrorIs(t, err, want)
			}
			if tt.output {
				assert.True(t, strings.HasPrefix(string(res.ResourceList.Materialize()), "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n"))
			} else {
				assert.Zero(t, res.ResourceList.Len())
			}
		})
	}
}

// panickingFunction panics two calls deep, as a function's own code would.
func panickingFunction(*fn.ResourceList) (bool, error) { return panicDeeper() }

func panicDeeper() (bool, error) { panic("kaboom") }

// A panic's log is what the function's binary would print: the message and
// the function's frames from the panic down to its entry, not the runner's
// recovery above them nor its own frames below.
func TestPanicLogShowsTheFunctionsFramesOnly(t *testing.T) {
	res, err := runInProcess(panickingFunction, []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"), 0)
	require.Error(t, err)
	log := string(res.Log)
	assert.True(t, strings.HasPrefix(log, "panic: kaboom\n\ngoroutine "), "log starts with the message and the goroutine:\n%s", log)
	assert.Contains(t, log, "runner.panicDeeper(", "where it panicked")
	assert.Contains(t, log, "runner.panickingFunction(", "the function's entry")
	for _, runners := range []string{"runtime/debug.Stack", "runner.runInProcess", "runner.process(", "panic("} {
		assert.NotContains(t, log, runners, "runner frames in the function's log:\n%s", log)
	}
}

// A stack Go cut short ("...N frames elided...") is trimmed as well: the
// line stands for frames of its own.
func TestFunctionFramesAcrossElidedFrames(t *testing.T) {
	stack := strings.Join([]string{
		"goroutine 7 [running]:",
		"runtime/debug.Stack()",
		"\t/go/src/runtime/debug/stack.go:26 +0x5e",
		"github.com/fnrunner/fnrunner/services/binary-runner/runner.runInProcess.func1()",
		"\t/src/runner/inprocess.go:84 +0x45",
		"panic({0x1, 0x2})",
		"\t/go/src/runtime/panic.go:792 +0x132",
		"example.com/fn.deep(...)",
		"\t/src/fn/fn.go:10",
		"...12 frames elided...",
		"example.com/fn.Process(0x1)",
		"\t/src/fn/fn.go:3 +0x25",
		"github.com/fnrunner/fnrunner/services/binary-runner/runner.process({0x1, 0x2})",
		"\t/src/runner/inprocess.go:125 +0x6a",
		"created by github.com/fnrunner/fnrunner/services/binary-runner/runner.(*inProcess).run in goroutine 30",
		"\t/src/runner/inprocess.go:57 +0xe7",
	}, "\n") + "\n"
	want := "goroutine 7 [running]:\nexample.com/fn.deep(...)\n\t/src/fn/fn.go:10\n...12 frames elided...\nexample.com/fn.Process(0x1)\n\t/src/fn/fn.go:3 +0x25\n"
	assert.Equal(t, want, string(functionFrames([]byte(stack))))
	// No panic frame (not debug.Stack's text of a panic): as it is.
	assert.Equal(t, "goroutine 1 [running]:\nmain.main()\n", string(functionFrames([]byte("goroutine 1 [running]:\nmain.main()\n"))))
}

// releaseLog is a failure that says what its release's binary wrote, as
// functions/internal/exitlog's errors do.
type releaseLog string

func (l releaseLog) Error() string   { return "failed" }
func (l releaseLog) ExitLog() string { return string(l) }
