// Package filesource serves FunctionConfigs read from YAML files instead of a
// cluster (the config-reconciler's --config-dir mode, for local use). The
// directory is re-read whenever a file in it changes.
package filesource

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/config-reconciler/configs"
)

// debounce coalesces the bursts of events an editor or `cp` produces.
const debounce = 100 * time.Millisecond

// Table receives the executor table; *store.Store implements it.
type Table interface {
	Replace(functions []*configpb.FunctionConfig) bool
}

// Load reads every *.yaml and *.yml file directly in dir. Documents of other
// kinds are skipped; a FunctionConfig without namespace gets namespace.
func Load(dir, namespace string) ([]v1alpha1.FunctionConfig, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []v1alpha1.FunctionConfig
	var errs []error
	for _, n := range names {
		fcs, err := loadFile(filepath.Join(dir, n), namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, fcs...)
	}
	return out, errors.Join(errs...)
}

func loadFile(path, namespace string) ([]v1alpha1.FunctionConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.FunctionConfig
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if tm.Kind != "FunctionConfig" || tm.APIVersion != v1alpha1.GroupVersion.String() {
			continue
		}
		var fc v1alpha1.FunctionConfig
		if err := yaml.UnmarshalStrict(doc, &fc); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if fc.Namespace == "" {
			fc.Namespace = namespace
		}
		// Files have no generations; 1 is what a new object would have.
		fc.Generation = 1
		out = append(out, fc)
	}
}

// Run loads dir into table and reloads it on every change until ctx ends.
// A file that cannot be read is reported and left out; the rest is served.
func Run(ctx context.Context, log *slog.Logger, dir, namespace string, opts configs.Options, table Table) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	load := func() {
		objs, err := Load(dir, namespace)
		if err != nil {
			log.Error("some FunctionConfig files could not be read", "dir", dir, "error", err)
		}
		entries, verdicts := configs.Evaluate(objs, opts)
		for key, v := range verdicts {
			if !v.Ready() {
				log.Warn("FunctionConfig not applied cleanly", "functionConfig", key.String(), "problems", v.Problems)
			}
		}
		if table.Replace(entries) {
			log.Info("executor table loaded from files", "dir", dir, "functionConfigs", len(objs), "entries", len(entries))
		}
	}
	load()
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			log.Debug("config dir changed", "event", ev.String())
			timer = time.After(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			log.Error("watching config dir", "error", err)
		case <-timer:
			load()
		}
	}
}
