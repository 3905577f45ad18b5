// Package porchconfig turns the configuration of porch v1.5's function
// runner into the FunctionConfigs that reproduce it under fnrunner: the
// exec runtime's --config (function binaries, by image) and the pod
// runtime's --pod-cache-config (warm pods and their TTLs, by image).
//
// Porch v1.5.8's formats, read from its func/internal/executableevaluator.go
// and podcachemanager.go:
//
//	functions:                      # --config
//	- function: set-namespace       # a file in --functions
//	  images: [ghcr.io/…/set-namespace:v0.4.2, …@sha256:…]
//
//	- name: ghcr.io/…/set-namespace:v0.4.1   # --pod-cache-config
//	  timeToLive: 30m
//	  maxWaitlistLength: 2
//	  maxParallelPodsPerFunction: 2
package porchconfig

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/imagematch"
)

// ErrInvalid is wrapped by every error about a file's content.
var ErrInvalid = errors.New("invalid porch runner configuration")

// ExecConfig is porch's exec runtime --config file.
type ExecConfig struct {
	Functions []ExecFunction `json:"functions"`
}

// ExecFunction is one binary and the images it answers for.
type ExecFunction struct {
	Function string   `json:"function"`
	Images   []string `json:"images"`
}

// PodCacheEntry is one image of porch's --pod-cache-config.
type PodCacheEntry struct {
	Name                       string `json:"name"`
	TimeToLive                 string `json:"timeToLive"`
	MaxWaitlistLength          int    `json:"maxWaitlistLength"`
	MaxParallelPodsPerFunction int    `json:"maxParallelPodsPerFunction"`
}

// ParseExec reads a --config file; unknown fields are refused, as a typo
// would otherwise drop a binary silently.
func ParseExec(data []byte) (ExecConfig, error) {
	var c ExecConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return ExecConfig{}, fmt.Errorf("%w: --config: %w", ErrInvalid, err)
	}
	for i, f := range c.Functions {
		if f.Function == "" || len(f.Images) == 0 {
			return ExecConfig{}, fmt.Errorf("%w: --config: functions[%d]: a function and at least one image are needed", ErrInvalid, i)
		}
	}
	return c, nil
}

// ParsePodCache reads a --pod-cache-config file.
func ParsePodCache(data []byte) ([]PodCacheEntry, error) {
	var entries []PodCacheEntry
	if err := yaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("%w: --pod-cache-config: %w", ErrInvalid, err)
	}
	for i, e := range entries {
		if e.Name == "" {
			return nil, fmt.Errorf("%w: --pod-cache-config: [%d]: no name (image)", ErrInvalid, i)
		}
	}
	return entries, nil
}

// Options say where the FunctionConfigs go.
type Options struct {
	// Namespace is the FunctionConfigs' namespace (fnrunner's function
	// namespace, porch's porch-fn-system).
	Namespace string
	// DefaultPrefix is what porch's runner takes an image without a
	// registry to be under (imagematch.DefaultPrefix when empty).
	DefaultPrefix string
	// PodTTL is porch's --pod-ttl: the TTL of an entry that gives none
	// (porch's default, 30m, when zero).
	PodTTL time.Duration
}

// Convert makes the FunctionConfigs that reproduce exec and pods: one per
// binary and image name (binaryExecutor, every tag and digest the binary
// answers for), and one podExecutor per pod-cache entry, since the
// pod-manager warms one pod per FunctionConfig, as porch warms one per
// entry. An entry's pod settings go into the binary's FunctionConfig when
// that image name has exactly one of each. Their order is by name.
func Convert(exec ExecConfig, pods []PodCacheEntry, o Options) ([]v1alpha1.FunctionConfig, error) {
	if o.PodTTL == 0 {
		o.PodTTL = 30 * time.Minute
	}
	type key struct{ prefix, name string }
	var out []*v1alpha1.FunctionConfig
	binaries := map[key][]*v1alpha1.FunctionConfig{}
	claimed := map[string]string{} // reference → the binary claiming it
	for _, f := range exec.Functions {
		perName := map[key]*v1alpha1.FunctionConfig{}
		for _, image := range f.Images {
			ref, err := imagematch.Parse(image, o.DefaultPrefix)
			if err != nil {
				return nil, fmt.Errorf("%w: --config: function %s: %w", ErrInvalid, f.Function, err)
			}
			tag := ref.Tag
			if ref.Digest != "" {
				// A digest reference is claimed by its digest, whatever
				// tag it also names.
				tag = ref.Digest
			}
			full := ref.Repository() + "@" + tag
			if other, ok := claimed[full]; ok && other != f.Function {
				// porch's runner keeps the last binary listed for an image.
				return nil, fmt.Errorf("%w: --config: %s is listed for %s and for %s", ErrInvalid, image, other, f.Function)
			}
			claimed[full] = f.Function
			k := key{ref.Prefix, ref.Name}
			fc, ok := perName[k]
			if !ok {
				fc = newConfig(o.Namespace, ref)
				fc.Spec.BinaryExecutor = &v1alpha1.BinaryExecutorConfig{Path: f.Function}
				perName[k] = fc
				binaries[k] = append(binaries[k], fc)
				out = append(out, fc)
			}
			if !slices.Contains(fc.Spec.BinaryExecutor.Tags, tag) {
				fc.Spec.BinaryExecutor.Tags = append(fc.Spec.BinaryExecutor.Tags, tag)
			}
		}
	}
	perName := map[key]int{}
	for _, e := range pods {
		ref, err := imagematch.Parse(e.Name, o.DefaultPrefix)
		if err != nil {
			return nil, fmt.Errorf("%w: --pod-cache-config: %w", ErrInvalid, err)
		}
		perName[key{ref.Prefix, ref.Name}]++
	}
	for _, e := range pods {
		ref, _ := imagematch.Parse(e.Name, o.DefaultPrefix)
		pod, err := podExecutor(e, ref, o.PodTTL)
		if err != nil {
			return nil, err
		}
		k := key{ref.Prefix, ref.Name}
		if bins := binaries[k]; len(bins) == 1 && perName[k] == 1 {
			bins[0].Spec.PodExecutor = pod
			continue
		}
		fc := newConfig(o.Namespace, ref)
		fc.Spec.PodExecutor = pod
		out = append(out, fc)
	}
	return named(out)
}

func podExecutor(e PodCacheEntry, ref imagematch.Reference, ttl time.Duration) (*v1alpha1.PodExecutorConfig, error) {
	if e.TimeToLive != "" {
		d, err := time.ParseDuration(e.TimeToLive)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: --pod-cache-config: %s: timeToLive %q is not a positive duration", ErrInvalid, e.Name, e.TimeToLive)
		}
		ttl = d
	}
	if e.MaxWaitlistLength < 0 || e.MaxParallelPodsPerFunction < 0 {
		return nil, fmt.Errorf("%w: --pod-cache-config: %s: negative limits", ErrInvalid, e.Name)
	}
	tag := ref.Tag
	if ref.Digest != "" {
		tag = ref.Digest
	}
	// Zero limits mean the pod-manager's flags, as porch's runner falls
	// back to its own flags for them.
	return &v1alpha1.PodExecutorConfig{
		Tags:                    []string{tag},
		TimeToLive:              metav1.Duration{Duration: ttl},
		MaxParallelExecutions:   e.MaxParallelPodsPerFunction,
		PreferredMaxQueueLength: e.MaxWaitlistLength,
	}, nil
}

func newConfig(namespace string, ref imagematch.Reference) *v1alpha1.FunctionConfig {
	return &v1alpha1.FunctionConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "FunctionConfig"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
		Spec:       v1alpha1.FunctionConfigSpec{Image: ref.Name, Prefixes: []string{ref.Prefix}},
	}
}

var notInName = regexp.MustCompile(`[^a-z0-9-]+`)

// named names each FunctionConfig for its image, then its binary or its
// pod tag where several share an image name, and sorts them by name.
func named(fcs []*v1alpha1.FunctionConfig) ([]v1alpha1.FunctionConfig, error) {
	count := map[string]int{}
	for _, fc := range fcs {
		count[fc.Spec.Image]++
	}
	seen := map[string]bool{}
	out := make([]v1alpha1.FunctionConfig, 0, len(fcs))
	for _, fc := range fcs {
		name := fc.Spec.Image
		if count[name] > 1 {
			switch {
			case fc.Spec.BinaryExecutor != nil:
				name += "-" + fc.Spec.BinaryExecutor.Path
			default:
				name += "-pod-" + fc.Spec.PodExecutor.Tags[0]
			}
		}
		name = strings.Trim(notInName.ReplaceAllString(strings.ToLower(name), "-"), "-")
		if len(name) > 253 || name == "" {
			return nil, fmt.Errorf("%w: no object name can be made for %s", ErrInvalid, fc.Spec.Image)
		}
		for base, i := name, 2; seen[name]; i++ {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		seen[name] = true
		fc.Name = name
		out = append(out, *fc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Write writes fcs as a YAML stream, status left out.
func Write(fcs []v1alpha1.FunctionConfig) ([]byte, error) {
	var b bytes.Buffer
	for i, fc := range fcs {
		obj := map[string]any{"apiVersion": fc.APIVersion, "kind": fc.Kind,
			"metadata": map[string]any{"name": fc.Name, "namespace": fc.Namespace}, "spec": fc.Spec}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(data)
	}
	return b.Bytes(), nil
}
