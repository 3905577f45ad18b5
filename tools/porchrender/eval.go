package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	fnresultv1 "github.com/kptdev/kpt/pkg/api/fnresult/v1"
	"github.com/kptdev/kpt/pkg/lib/runneroptions"
	"github.com/kptdev/kpt/pkg/printer"
	"github.com/kptdev/kpt/thirdparty/cmdconfig/commands/cmdeval"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// runEval is `porchrender eval`: kpt's own `kpt fn eval` command (kpt's
// cmdeval, the code the kpt binary runs) on DIR, with the function called
// through porch's gRPC client. Porch has no eval of its own (porch v1.5.8's
// tasks are init, clone, edit, upgrade, render and push), so this is the
// nearest path a porch user's function call takes for an eval: kpt decides
// what goes in and what is written back, porch's client carries the call.
//
// kpt fn eval runs an image with docker only; what it can run otherwise is
// an executable (--exec). So kpt is given `porchrender call …` as the
// executable, which hands its stdin to EvaluateFunction and the answer's
// ResourceList to its stdout. kpt records such a function by its exec
// path; the result list printed names the image instead, as kpt fn eval
// --image would.
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("porchrender eval", flag.ContinueOnError)
	fl.SetOutput(stderr)
	address := fl.String("address", "localhost:9445", "The function runner's address (porch-server's --function-runner).")
	maxSize := fl.Int("max-message-size", defaultMaxMessageSize, "gRPC message size limit, both ways (porch-server's --max-request-body-size).")
	image := fl.String("image", "", "The function's image, as kpt fn eval --image names it.")
	fnConfig := fl.String("fn-config", "", "The function config file (kpt fn eval --fn-config); else the arguments after -- make a ConfigMap, as kpt's do.")
	timeout := fl.Duration("timeout", 2*time.Minute, "Deadline of the function call.")
	images := imageMap{}
	fl.Var(images, "map-image", "OLD=NEW: send image NEW when --image is OLD; the result list still names OLD, as for a render.")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: porchrender eval --image IMAGE [flags] DIR [-- KEY=VALUE ...]")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *image == "" || fl.NArg() < 1 {
		fl.Usage()
		return 2
	}
	dir, items := fl.Arg(0), fl.Args()[1:]
	if len(items) > 0 && items[0] == "--" {
		items = items[1:]
	}
	// kpt fn eval --image resolves a catalog function's short name to the
	// catalog's registry, sends that and names the result by it.
	resolve := (&runneroptions.RunnerOptions{}).ResolveToImageForCLIFunc(runneroptions.GHCRImagePrefix)
	name, _ := resolve(ctx, *image)
	send := *image
	if to, ok := images[send]; ok {
		send = to
	}
	send, _ = resolve(ctx, send)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "porchrender: %v\n", err)
		return 2
	}
	results, err := os.MkdirTemp("", "porchrender-results-")
	if err != nil {
		fmt.Fprintf(stderr, "porchrender: %v\n", err)
		return 2
	}
	defer os.RemoveAll(results)

	// kpt splits --exec as a shell would (shlex): each word quoted.
	var call []string
	for _, w := range []string{self, "call",
		"--address", *address,
		"--max-message-size", strconv.Itoa(*maxSize),
		"--timeout", timeout.String(),
		"--image", send} {
		call = append(call, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
	}
	kptArgs := []string{dir, "--exec", strings.Join(call, " "), "--results-dir", results}
	if *fnConfig != "" {
		kptArgs = append(kptArgs, "--fn-config", *fnConfig)
	}
	if len(items) > 0 {
		kptArgs = append(append(kptArgs, "--"), items...)
	}
	ctx = printer.WithContext(ctx, printer.New(stderr, stderr))
	cmd := cmdeval.EvalCommand(ctx, "fn")
	cmd.SetArgs(kptArgs)
	cmd.SetOut(stderr)
	cmd.SetErr(stderr)
	cmd.SilenceUsage = true
	evalErr := cmd.ExecuteContext(ctx)

	list, err := readResults(filepath.Join(results, "results.yaml"), name)
	if err != nil {
		if evalErr != nil {
			// kpt refused before running anything (it writes results
			// only once the function ran).
			fmt.Fprintf(stderr, "porchrender: kpt fn eval: %v\n", evalErr)
			return 2
		}
		fmt.Fprintf(stderr, "porchrender: %v\n", err)
		return 2
	}
	if _, err := stdout.Write(list); err != nil {
		fmt.Fprintf(stderr, "porchrender: %v\n", err)
		return 2
	}
	if evalErr != nil {
		fmt.Fprintf(stderr, "porchrender: kpt fn eval: %v\n", evalErr)
		return 1
	}
	return 0
}

// readResults reads the result list kpt saved and gives it as porch's API
// type in JSON, as the render prints its own, naming the image where kpt
// named the executable.
func readResults(path, image string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kpt's result list: %w", err)
	}
	var list fnresultv1.ResultList
	if err := yaml.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("kpt's result list: %w", err)
	}
	for i := range list.Items {
		list.Items[i].Image, list.Items[i].ExecPath = image, ""
	}
	return porchResultList(list)
}

// runCall is `porchrender call`, the executable kpt fn eval runs: its stdin
// (the ResourceList kpt made) to EvaluateFunction through porch's client,
// the answer's ResourceList to its stdout; a failed call is its stderr and
// exit code 1, which kpt reports as the function's failure.
func runCall(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("porchrender call", flag.ContinueOnError)
	fl.SetOutput(stderr)
	address := fl.String("address", "localhost:9445", "The function runner's address.")
	maxSize := fl.Int("max-message-size", defaultMaxMessageSize, "gRPC message size limit, both ways.")
	image := fl.String("image", "", "The function's image.")
	timeout := fl.Duration("timeout", 2*time.Minute, "Deadline of the call.")
	if err := fl.Parse(args); err != nil || *image == "" || fl.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: porchrender call --image IMAGE [--address A] [--max-message-size N] [--timeout D] < resource-list")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rt, err := newRuntime(*address, *maxSize, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer rt.Close()
	r := &runner{ctx: ctx, client: rt.client, image: *image}
	if err := r.Run(stdin, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
