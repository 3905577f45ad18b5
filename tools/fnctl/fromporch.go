package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fnrunner/fnrunner/tools/fnctl/porchconfig"
)

// fromPorch writes the FunctionConfigs that reproduce porch v1.5's runner
// configuration: its --config (exec binaries) and --pod-cache-config (warm
// pods), the files porch's runner Deployment names.
func fromPorch(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fnctl from-porch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var config, podCache, namespace, prefix string
	var ttl time.Duration
	fs.StringVar(&config, "config", "", "porch's runner --config: the exec runtime's binaries by image (in porch's image, /home/nonroot/config.yaml).")
	fs.StringVar(&podCache, "pod-cache-config", "", "porch's runner --pod-cache-config: warm pods by image (porch's ConfigMap pod-cache-config, key pod-cache-config.yaml).")
	fs.StringVar(&namespace, "namespace", "porch-fn-system", "Namespace of the FunctionConfigs (the config-reconciler's --namespace).")
	fs.StringVar(&prefix, "default-image-prefix", "", "What porch's runner takes an image without a registry to be under (default ghcr.io/kptdev/krm-functions-catalog/).")
	fs.DurationVar(&ttl, "pod-ttl", 30*time.Minute, "porch's runner --pod-ttl: the TTL of a warm pod its entry gives none.")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: fnctl from-porch [--config FILE] [--pod-cache-config FILE] > functionconfigs.yaml\n\nWrites the FunctionConfigs that reproduce porch v1.5's function-runner configuration: one per\nbinary and image name for --config (binaryExecutor: every tag and digest it answers for), and a\npodExecutor with the TTL and limits of each --pod-cache-config entry (one warm pod each). Paths\nare the binaries' names in the binary-runner's --functions directory, as in porch's.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError{2}
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "unexpected arguments")
	}
	if config == "" && podCache == "" {
		return usageErr(stderr, "give --config, --pod-cache-config or both")
	}
	var exec porchconfig.ExecConfig
	var pods []porchconfig.PodCacheEntry
	if config != "" {
		data, err := os.ReadFile(config)
		if err != nil {
			return err
		}
		if exec, err = porchconfig.ParseExec(data); err != nil {
			return err
		}
	}
	if podCache != "" {
		data, err := os.ReadFile(podCache)
		if err != nil {
			return err
		}
		if pods, err = porchconfig.ParsePodCache(data); err != nil {
			return err
		}
	}
	fcs, err := porchconfig.Convert(exec, pods, porchconfig.Options{Namespace: namespace, DefaultPrefix: prefix, PodTTL: ttl})
	if err != nil {
		return err
	}
	out, err := porchconfig.Write(fcs)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}
