// Package configs turns FunctionConfig objects into the executor table and
// says, for each object, whether it applies cleanly: invalid fields, invalid
// binary paths and conflicts with other FunctionConfigs are problems that
// keep it from being Ready. Cluster mode and --config-dir mode share it.
package configs

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/executortable"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// Options are the rules the runners apply, so status can report breaches.
type Options struct {
	// DefaultImagePrefix is what "" and images without "/" mean.
	DefaultImagePrefix string
	// AllowAbsoluteBinaryPaths lets binaryExecutor.path be absolute.
	AllowAbsoluteBinaryPaths bool
}

// Verdict is what status reports for one FunctionConfig.
type Verdict struct {
	// Problems keep the object from being Ready; each is one sentence.
	Problems []string
	// Conflicts is the subset of Problems about other FunctionConfigs.
	Conflicts []string
	// Unrunnable is the subset of Problems the binary-runners report: a
	// binary executor in the table that a runner cannot run (its calls go
	// on to the next executor).
	Unrunnable []string
}

// OnlyUnrunnable reports whether the object is in the table as given and
// only the binary-runners find fault with it.
func (v Verdict) OnlyUnrunnable() bool {
	return len(v.Unrunnable) > 0 && len(v.Problems) == len(v.Unrunnable)
}

// Ready reports whether the object applied without problems.
func (v Verdict) Ready() bool { return len(v.Problems) == 0 }

// Evaluate converts objects into the table's entries and judges each one.
// An executor section with a problem is left out of the table; conflicting
// claims are left out by the lookup tables themselves.
func Evaluate(objs []v1alpha1.FunctionConfig, opts Options) ([]*configpb.FunctionConfig, map[types.NamespacedName]Verdict) {
	verdicts := make(map[types.NamespacedName]Verdict, len(objs))
	var entries []*configpb.FunctionConfig
	for i := range objs {
		fc := &objs[i]
		if fc.DeletionTimestamp != nil {
			continue
		}
		entry, problems := Convert(fc, opts)
		key := types.NamespacedName{Namespace: fc.Namespace, Name: fc.Name}
		verdicts[key] = Verdict{Problems: problems}
		if entry != nil {
			entries = append(entries, entry)
		}
	}
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: opts.DefaultImagePrefix, Functions: entries})
	for key, v := range verdicts {
		owner := key.Namespace + "/" + key.Name
		if err := tables.Invalid[owner]; err != nil {
			v.Problems = append(v.Problems, err.Error())
		}
		if cs := tables.ConflictsOf(owner); len(cs) > 0 {
			v.Conflicts = cs
			v.Problems = append(v.Problems, cs...)
		}
		verdicts[key] = v
	}
	return entries, verdicts
}

// Convert turns one FunctionConfig into its table entry. Sections with
// problems are left out; nil means nothing of it can be used.
func Convert(fc *v1alpha1.FunctionConfig, opts Options) (*configpb.FunctionConfig, []string) {
	var problems []string
	spec := fc.Spec
	image := strings.TrimSpace(spec.Image)
	if image == "" || strings.ContainsAny(image, "/:@ ") {
		return nil, []string{fmt.Sprintf("spec.image %q must be a function name without registry, tag or digest", spec.Image)}
	}
	if spec.GoExecutor == nil && spec.BinaryExecutor == nil && spec.PodExecutor == nil {
		return nil, []string{"at least one of spec.goExecutor, spec.binaryExecutor, spec.podExecutor must be set"}
	}
	out := &configpb.FunctionConfig{
		Namespace: fc.Namespace,
		Name:      fc.Name,
		Image:     image,
		Prefixes:  spec.Prefixes,
	}
	if g := spec.GoExecutor; g != nil {
		id := image
		if g.ID != nil && *g.ID != "" {
			id = *g.ID
		}
		if len(g.Tags) == 0 {
			problems = append(problems, "spec.goExecutor.tags must not be empty")
		} else {
			out.Go = &configpb.GoExecutor{Tags: g.Tags, Id: id}
		}
	}
	if b := spec.BinaryExecutor; b != nil {
		switch {
		case len(b.Tags) == 0:
			problems = append(problems, "spec.binaryExecutor.tags must not be empty")
		default:
			if strings.TrimSpace(b.Path) == "" {
				problems = append(problems, "spec.binaryExecutor.path must not be empty")
			} else if _, err := executortable.ResolveBinary("", b.Path, opts.AllowAbsoluteBinaryPaths); err != nil {
				problems = append(problems, "spec.binaryExecutor.path: "+err.Error())
			} else {
				out.Binary = &configpb.BinaryExecutor{Tags: b.Tags, Path: filepath.Clean(b.Path)}
			}
		}
	}
	if p := spec.PodExecutor; p != nil {
		pod := &configpb.PodExecutor{
			Tags:                    p.Tags,
			MaxParallelExecutions:   int32(p.MaxParallelExecutions),
			PreferredMaxQueueLength: int32(p.PreferredMaxQueueLength),
		}
		// Left 0 when the object gives none (porch's CRD defaults it to
		// 30m): the pod-manager's --pod-ttl then applies.
		if p.TimeToLive.Duration > 0 {
			pod.TimeToLiveSeconds = int64(p.TimeToLive.Duration / time.Second)
		}
		if p.MaxParallelExecutions < 0 || p.PreferredMaxQueueLength < 0 {
			problems = append(problems, "spec.podExecutor: maxParallelExecutions and preferredMaxQueueLength must not be negative")
			pod = nil
		} else if p.TemplateOverrides != nil {
			raw, err := json.Marshal(p.TemplateOverrides)
			if err != nil {
				problems = append(problems, fmt.Sprintf("spec.podExecutor.templateOverrides: %v", err))
				pod = nil
			} else {
				pod.TemplateOverridesJson = raw
			}
		}
		if pod != nil {
			out.Pod = pod
		}
	}
	sort.Strings(problems)
	if out.Go == nil && out.Binary == nil && out.Pod == nil {
		return nil, problems
	}
	return out, problems
}
