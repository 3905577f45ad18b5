package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/binary-runner/catalog"
)

type fixedTables struct{ t *executortable.Tables }

func (f fixedTables) Await(context.Context, time.Duration) *executortable.Tables { return f.t }

func newRunner(functions map[string]catalog.Function, entries ...*configpb.FunctionConfig) *Runner {
	return New(fixedTables{executortable.Build(&configpb.Snapshot{Version: 1, Functions: entries})}, functions,
		Options{FunctionsDir: "/nonexistent", Exec: fnexec.Options{MaxLogBytes: 1 << 20}, MaxOutputBytes: 1 << 20})
}

func goEntry(image, id string) *configpb.FunctionConfig {
	return &configpb.FunctionConfig{Namespace: "ns", Name: image, Image: image, Go: &configpb.GoExecutor{Tags: []string{"v1"}, Id: id}}
}

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

func TestStarlarkPrintIsTheCallsLog(t *testing.T) {
	r := newRunner(catalog.Functions(), goEntry("starlark", "starlark"))
	req := &evalwire.Request{Image: "starlark:v1", ResourceList: evalwire.Bytes([]byte(rl + `functionConfig:
  apiVersion: fn.kpt.dev/v1alpha1
  kind: StarlarkRun
  metadata:
    name: p
  source: |
    print("hello from starlark")
`))}
	resp, err := r.EvaluateFunction(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(resp.Log), "hello from starlark") {
		t.Errorf("log = %q, want the print output", resp.Log)
	}
}

func TestPanicIsInternal(t *testing.T) {
	r := newRunner(map[string]catalog.Function{"boom": {Process: func(*fn.ResourceList) (bool, error) { panic("kaboom") }}}, goEntry("boom", "boom"))
	_, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "boom:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	if st := status.Convert(err); st.Code() != codes.Internal {
		t.Fatalf("panic = %v, want Internal", err)
	}
	if d, ok := fnexec.FailureDetails(err); !ok || !strings.Contains(string(d.GetLog()), "kaboom") {
		t.Errorf("panic details = %v, %v", d, ok)
	}
	// The runner is still fine.
	if _, err := r.EvaluateFunction(context.Background(), &evalwire.Request{Image: "nope:v1", ResourceList: evalwire.Bytes([]byte(rl))}); status.Code(err) != codes.NotFound {
		t.Errorf("after a panic: %v", err)
	}
}

func TestDeadlineForInProcessFunction(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newRunner(map[string]catalog.Function{"slow": {Process: func(*fn.ResourceList) (bool, error) { <-release; return true, nil }}}, goEntry("slow", "slow"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.EvaluateFunction(ctx, &evalwire.Request{Image: "slow:v1", ResourceList: evalwire.Bytes([]byte(rl))})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("slow function = %v, want DeadlineExceeded", err)
	}
}

func TestBinaryPathsStayInsideFunctionsDir(t *testing.T) {
	r := newRunner(nil)
	for _, p := range []string{"../x", "..", "/bin/sh", "a/../../x"} {
		if _, err := r.resolve(p); err == nil {
			t.Errorf("resolve(%q) accepted", p)
		}
	}
	if got, err := r.resolve("sub/fn"); err != nil || got != "/nonexistent/sub/fn" {
		t.Errorf("resolve(sub/fn) = %q, %v", got, err)
	}
	r.opts.AllowAbsolutePaths = true
	if got, err := r.resolve("/bin/sh"); err != nil || got != "/bin/sh" {
		t.Errorf("allowed absolute path: %q, %v", got, err)
	}
}
