// The flags and setup of the benches that start the services.

package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fnrunner/fnrunner/tools/localstack"
)

// stackFlags are the flags of the benches that start the services: their
// binaries (set by the Bazel targets) and FunctionConfigs.
type stackFlags struct {
	bins         localstack.Binaries
	setNamespace string
	configDir    string
}

func (f *stackFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bins.Gateway, "gateway-binary", "", "Path of the gateway binary (set by the Bazel target).")
	fs.StringVar(&f.bins.BinaryRunner, "binary-runner-binary", "", "Path of the binary-runner binary (set by the Bazel target).")
	fs.StringVar(&f.bins.ConfigReconciler, "config-reconciler-binary", "", "Path of the config-reconciler binary (set by the Bazel target).")
	fs.StringVar(&f.bins.Fnsandbox, "fnsandbox-binary", "", "Path of the fnsandbox helper (set by the Bazel target).")
	fs.StringVar(&f.setNamespace, "set-namespace-binary", "", "Path of the set-namespace function binary (set by the Bazel target).")
	fs.StringVar(&f.configDir, "config-dir", "deploy/local/functionconfigs", "FunctionConfig files.")
}

// resolve makes the binaries' paths absolute and returns a functions
// directory holding set-namespace, which the caller removes. target names
// the Bazel target that sets the flags.
func (f *stackFlags) resolve(target string) (string, error) {
	for _, p := range []*string{&f.bins.Gateway, &f.bins.BinaryRunner, &f.bins.ConfigReconciler, &f.bins.Fnsandbox, &f.setNamespace} {
		if *p == "" {
			return "", fmt.Errorf("binaries not given: run tools/bazel run //tools/bench:%s", target)
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return "", err
		}
		*p = abs
	}
	dir, err := os.MkdirTemp("", "bench-functions-")
	if err != nil {
		return "", err
	}
	if err := os.Symlink(f.setNamespace, filepath.Join(dir, "set-namespace")); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}
