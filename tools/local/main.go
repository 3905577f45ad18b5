// Command local runs fnrunner on this machine: the config-reconciler reading
// deploy/local/functionconfigs (reloaded when a file changes), the
// binary-runner with the catalog function binaries, and the gateway on
// --port, all on loopback. It is the README's run command:
//
//	tools/bazel run //tools/local            # gateway on localhost:9445
//	tools/bazel run //tools/local -- --port=9555 --log-level=INFO
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

type functionsFlag map[string]string

func (f functionsFlag) String() string { return fmt.Sprint(map[string]string(f)) }

func (f functionsFlag) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("%q is not name=path", v)
	}
	f[name] = path
	return nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	var (
		bins      localstack.Binaries
		port      int
		configDir string
		logLevel  string
		functions = functionsFlag{}
	)
	defaultConfigDir := "deploy/local/functionconfigs"
	if ws := os.Getenv("BUILD_WORKSPACE_DIRECTORY"); ws != "" {
		defaultConfigDir = filepath.Join(ws, defaultConfigDir)
	}
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcserving.Usage(fs, "Runs fnrunner on this machine: config-reconciler (--config-dir), binary-runner (catalog functions)\nand gateway (--port) on loopback, until interrupted. Set by tools/bazel run //tools/local.")
	fs.IntVar(&port, "port", 9445, "Port of the gateway (porch's --function-runner, fnctl's --gateway).")
	fs.StringVar(&configDir, "config-dir", defaultConfigDir, "Directory of FunctionConfig YAML files; edits are picked up while running.")
	fs.StringVar(&logLevel, "log-level", "INFO", "Log level of the services: DEBUG, INFO, WARN or ERROR.")
	fs.StringVar(&bins.Gateway, "gateway-binary", "", "Path of the gateway binary (set by the Bazel target).")
	fs.StringVar(&bins.BinaryRunner, "binary-runner-binary", "", "Path of the binary-runner binary (set by the Bazel target).")
	fs.StringVar(&bins.ConfigReconciler, "config-reconciler-binary", "", "Path of the config-reconciler binary (set by the Bazel target).")
	fs.StringVar(&bins.Fnsandbox, "fnsandbox-binary", "", "Path of the fnsandbox helper, the binary-runner's --sandbox-helper (set by the Bazel target).")
	fs.Var(functions, "function", "name=path of a function binary for the functions directory; repeatable (set by the Bazel target).")
	if err := grpcserving.Parse(fs, args); err != nil {
		return grpcserving.FlagError(err)
	}
	// A relative --config-dir is the caller's, not the runfiles
	// directory bazel run starts this in.
	if wd := os.Getenv("BUILD_WORKING_DIRECTORY"); wd != "" && !filepath.IsAbs(configDir) {
		configDir = filepath.Join(wd, configDir)
	}
	for _, p := range []*string{&bins.Gateway, &bins.BinaryRunner, &bins.ConfigReconciler} {
		if *p == "" {
			return grpcserving.FlagError(errors.New("service binaries not given: run this with tools/bazel run //tools/local"))
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}

	functionsDir, err := os.MkdirTemp("", "fnrunner-functions-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(functionsDir)
	for name, path := range functions {
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, filepath.Join(functionsDir, name)); err != nil {
			return err
		}
	}

	s, err := localstack.Start(localstack.Config{
		Binaries:     bins,
		ConfigDir:    configDir,
		FunctionsDir: functionsDir,
		GatewayPort:  port,
		LogLevel:     logLevel,
		Output:       stderr,
	})
	defer func() {
		if stopErr := s.Stop(30 * time.Second); stopErr != nil {
			fmt.Fprintln(stderr, stopErr)
		}
	}()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.WaitServing(wctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, `
fnrunner is serving evaluator.FunctionEvaluator on %s
  FunctionConfigs: %s (edit to change; reloaded live)
  try:  echo 'apiVersion: v1
kind: ConfigMap
metadata: {name: demo}' | tools/bazel run //tools/fnctl -- eval --gateway=%s --image=set-namespace:v0.4.5 -- namespace=prod
Press Ctrl-C to stop.
`, s.GatewayAddress, configDir, s.GatewayAddress)
	<-ctx.Done()
	fmt.Fprintln(stderr, "stopping")
	return nil
}

func main() { grpcserving.Main("local", run) }
