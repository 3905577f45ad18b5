// Command porchrender renders a kpt package the way porch-server does, so
// that fnrunner's conformance suite can drive it: kpt's render library
// (kptops of kpt v1.0.0-beta.61: porch v1.5.8 pins beta.61.1, which the
// module proxy does not serve) with a function runtime that calls
// EvaluateFunction through porch's generated client exactly as porch's
// grpcRuntime does (insecure transport, one connection, porch's message size
// limit), and without porch's builtin runtime, so every function goes to the
// runner.
//
//	porchrender --address localhost:9445 [--map-image old=new ...] DIR
//	porchrender eval --address localhost:9445 --image IMAGE [--fn-config F] DIR [-- KEY=VALUE ...]
//
// The second form is kpt's own `kpt fn eval` with the function called
// through porch's client (eval.go): porch has no eval of its own.
//
// It reads DIR into memory (as porch reads a package revision), renders it,
// writes the package back to DIR and prints the result list as porch keeps it
// in a PackageRevision's render status (porch's ResultList, as JSON) on
// stdout. It exits 1 when the render failed (the result list says why), 2
// on bad usage or I/O.
//
// It is its own Go module (tools/porchrender/go.mod) so that kpt's and
// porch's Kubernetes libraries stay out of fnrunner's go.mod; Bazel builds it
// with go build from the module proxy (tools/bzl/porchrender.bzl).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	kptfilev1 "github.com/kptdev/kpt/pkg/api/kptfile/v1"
	kptfn "github.com/kptdev/kpt/pkg/fn"
	"github.com/kptdev/kpt/pkg/lib/kptops"
	"github.com/kptdev/kpt/pkg/lib/runneroptions"
	porchapi "github.com/nephio-project/porch/api/porch/v1alpha1"
	"github.com/nephio-project/porch/func/evaluator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// porch-server's --max-request-body-size default, which it also uses as the
// gRPC message limit towards the function runner.
const defaultMaxMessageSize = 6 * 1024 * 1024

type imageMap map[string]string

func (m imageMap) String() string { return fmt.Sprint(map[string]string(m)) }

func (m imageMap) Set(v string) error {
	from, to, ok := strings.Cut(v, "=")
	if !ok || from == "" || to == "" {
		return fmt.Errorf("want OLD=NEW, not %q", v)
	}
	m[from] = to
	return nil
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "eval":
			return runEval(ctx, args[1:], stdout, stderr)
		case "call":
			return runCall(ctx, args[1:], os.Stdin, stdout, stderr)
		}
	}
	fl := flag.NewFlagSet("porchrender", flag.ContinueOnError)
	fl.SetOutput(stderr)
	address := fl.String("address", "localhost:9445", "The function runner's address (porch-server's --function-runner).")
	maxSize := fl.Int("max-message-size", defaultMaxMessageSize, "gRPC message size limit, both ways (porch-server's --max-request-body-size).")
	prefix := fl.String("default-image-prefix", runneroptions.GHCRImagePrefix, "Prefix of function images named without a registry (porch-server's --default-image-prefix).")
	timeout := fl.Duration("timeout", 2*time.Minute, "Deadline of the whole render.")
	images := imageMap{}
	fl.Var(images, "map-image", "OLD=NEW: send image NEW when a Kptfile names OLD (repeatable); porch sends names as they are.")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() != 1 {
		fmt.Fprintln(stderr, "porchrender: want one package directory")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	failed, err := render(ctx, fl.Arg(0), *address, *maxSize, *prefix, images, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "porchrender: %v\n", err)
		if !failed {
			return 2
		}
	}
	if failed {
		return 1
	}
	return 0
}

// render renders dir as porch's renderPackageMutation does; failed says the
// render itself failed (a function, or kpt).
func render(ctx context.Context, dir, address string, maxSize int, prefix string, images imageMap, out io.Writer) (failed bool, err error) {
	mem := filesys.MakeFsInMemory()
	// Porch writes a package revision's files at the root of the in-memory
	// file system and renders the topmost directory with a Kptfile
	// (pkg/task/render.go writeResources): "/" here.
	const pkgPath = "/"
	if err := load(dir, mem, pkgPath); err != nil {
		return false, err
	}
	rt, err := newRuntime(address, maxSize, images)
	if err != nil {
		return false, err
	}
	defer rt.Close()

	opts := runneroptions.RunnerOptions{}
	opts.InitDefaults(prefix)
	result, renderErr := kptops.NewRenderer(opts).Render(ctx, mem, kptfn.RenderOptions{PkgPath: pkgPath, Runtime: rt})
	if result != nil {
		b, err := porchResultList(result)
		if err != nil {
			return renderErr != nil, err
		}
		if _, err := out.Write(b); err != nil {
			return renderErr != nil, err
		}
	}
	if renderErr != nil {
		return true, renderErr
	}
	return false, store(mem, pkgPath, dir)
}

// porchResultList is what porch keeps and shows of kpt's result list:
// converted, through JSON, to porch's API type (pkg/task/render.go
// convertResultList), as JSON.
func porchResultList(kptList any) ([]byte, error) {
	var rr porchapi.ResultList
	b, err := json.Marshal(kptList)
	if err == nil {
		err = json.Unmarshal(b, &rr)
	}
	if err == nil {
		b, err = json.Marshal(rr)
	}
	return b, err
}

// load copies the files below dir into the in-memory file system at root.
func load(dir string, mem filesys.FileSystem, root string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return mem.MkdirAll(filepath.Join(root, rel))
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join(root, rel), b)
	})
}

// store makes dir hold what the in-memory package holds: porch replaces a
// package revision's files with the rendered ones.
func store(mem filesys.FileSystem, root, dir string) error {
	want := map[string][]byte{}
	err := mem.Walk(root, func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		b, err := mem.ReadFile(p)
		want[rel] = b
		return err
	})
	if err != nil {
		return err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, ".git"+string(filepath.Separator)) {
			return nil
		}
		if _, ok := want[rel]; !ok {
			return os.Remove(p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for rel, b := range want {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runtime is porch's grpcRuntime: every function goes to the runner
// through one client connection.
type runtime struct {
	cc     *grpc.ClientConn
	client evaluator.FunctionEvaluatorClient
	images imageMap
}

var _ kptops.FunctionRuntime = (*runtime)(nil)

func newRuntime(address string, maxSize int, images imageMap) (*runtime, error) {
	cc, err := grpc.NewClient(address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxSize), grpc.MaxCallSendMsgSize(maxSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("dialling the function runner: %w", err)
	}
	return &runtime{cc: cc, client: evaluator.NewFunctionEvaluatorClient(cc), images: images}, nil
}

func (r *runtime) GetRunner(ctx context.Context, f *kptfilev1.Function) (kptfn.FunctionRunner, error) {
	image := f.Image
	if to, ok := r.images[image]; ok {
		image = to
	}
	return &runner{ctx: ctx, client: r.client, image: image}, nil
}

func (r *runtime) Close() error { return r.cc.Close() }

// runner is porch's grpcRunner: the ResourceList in, the ResourceList out,
// an error for anything else.
type runner struct {
	ctx    context.Context
	client evaluator.FunctionEvaluatorClient
	image  string
}

var _ kptfn.FunctionRunner = (*runner)(nil)

func (r *runner) Run(in io.Reader, out io.Writer) error {
	b, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("failed to read function runner input: %w", err)
	}
	res, err := r.client.EvaluateFunction(r.ctx, &evaluator.EvaluateFunctionRequest{ResourceList: b, Image: r.image})
	if err != nil {
		return fmt.Errorf("func eval %q failed: %w", r.image, err)
	}
	if _, err := out.Write(res.ResourceList); err != nil {
		return fmt.Errorf("failed to write function runner output: %w", err)
	}
	return nil
}
