// Package reports keeps what the binary-runners report: which binary
// executors of the table they cannot run (their filesystems are their own:
// the config-reconciler cannot look). Every replica receives reports on its
// stream service and stores each in Kubernetes, one ConfigMap per runner
// (ConfigMaps), so that the elected leader, which writes status, reads the
// reports every replica received (List, Problems). The Report RPC is not
// authenticated, so a report is taken only from a runner that is a
// binary-runner Pod of the namespace (with the UID the report gives, if
// any), and its ConfigMap is always owned by that Pod and goes with it:
// there are never more reports than runner pods. Without an apiserver
// (--config-dir) reports are only logged, for a bounded number of runners
// (Memory).
package reports

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// Label marks a runner's report ConfigMap (value "true").
const Label = "fnrunner.dev/runner-report"

// DataKey is the ConfigMap key holding the Report as JSON.
const DataKey = "report.json"

// namePrefix starts every report ConfigMap's name.
const namePrefix = "fnrunner-runner-report-"

// maxNameLength is a ConfigMap name's limit (a DNS subdomain).
const maxNameLength = 253

// maxNamed is how many runners an error names; the rest are counted.
const maxNamed = 3

// Selector selects the report ConfigMaps.
func Selector() labels.Selector { return labels.SelectorFromSet(labels.Set{Label: "true"}) }

// Report is one runner's report as stored.
type Report struct {
	// Runner is the runner's pod name (with --config-dir, any name, e.g.
	// its host's).
	Runner string `json:"runner"`
	// RunnerUID is its pod's UID, when the runner gave it.
	RunnerUID string `json:"runnerUID,omitempty"`
	// Epoch and Version name the snapshot reported on.
	Epoch   string `json:"epoch"`
	Version uint64 `json:"version"`
	// Unrunnable are the binary executors the runner cannot run.
	Unrunnable []Binary `json:"unrunnable"`
}

// Binary is a binary executor a runner cannot run.
type Binary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Path is the executor's path, as the table gave it.
	Path string `json:"path"`
	// Reason is the runner's, e.g. "no such file" or "not executable".
	Reason string `json:"reason"`
}

// FromProto converts a report as received.
func FromProto(r *configpb.RunnerReport) Report {
	out := Report{Runner: r.GetRunner(), RunnerUID: r.GetRunnerUid(), Epoch: r.GetEpoch(), Version: r.GetVersion(), Unrunnable: []Binary{}}
	for _, u := range r.GetUnrunnable() {
		out.Unrunnable = append(out.Unrunnable, Binary{Namespace: u.GetNamespace(), Name: u.GetName(), Path: u.GetPath(), Reason: u.GetReason()})
	}
	return out
}

// Name is the report ConfigMap's name for a runner: the prefix and the
// runner's name when that is a valid name, otherwise as much of it as is
// valid and fits, followed by a hash of the whole.
func Name(runner string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(runner) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	safe := strings.Trim(b.String(), "-")
	if safe == runner && safe != "" && len(namePrefix)+len(safe) <= maxNameLength {
		return namePrefix + safe
	}
	sum := sha256.Sum256([]byte(runner))
	hash := hex.EncodeToString(sum[:])[:10]
	if keep := maxNameLength - len(namePrefix) - len(hash) - 1; len(safe) > keep {
		safe = strings.TrimRight(safe[:keep], "-")
	}
	if safe == "" {
		return namePrefix + hash
	}
	return namePrefix + safe + "-" + hash
}

// Decode reads the report a ConfigMap holds.
func Decode(cm *corev1.ConfigMap) (Report, error) {
	var r Report
	data, ok := cm.Data[DataKey]
	if !ok {
		return r, fmt.Errorf("runner report %s/%s has no %s", cm.Namespace, cm.Name, DataKey)
	}
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		return r, fmt.Errorf("runner report %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return r, nil
}

// List reads the stored reports in namespace (from a cache, on the leader);
// one that cannot be read is logged and left out.
func List(ctx context.Context, log *slog.Logger, c client.Reader, namespace string) ([]Report, error) {
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: Selector()}); err != nil {
		return nil, fmt.Errorf("listing runner reports: %w", err)
	}
	out := make([]Report, 0, len(cms.Items))
	for i := range cms.Items {
		r, err := Decode(&cms.Items[i])
		if err != nil {
			log.Warn("ignoring a runner report", "error", err)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// Names are the FunctionConfigs a report names.
func (r Report) Names() []types.NamespacedName {
	var out []types.NamespacedName
	for _, u := range r.Unrunnable {
		out = append(out, types.NamespacedName{Namespace: u.Namespace, Name: u.Name})
	}
	return out
}

// Problems are the status errors the reports make for one FunctionConfig
// whose binary executor in the current table has path: one per reason,
// naming up to a few runners, e.g.
//
//	binaryExecutor /fn: not runnable on binary-runner r-1, r-2: no such file
//
// A report on an older table that named another path for it does not count.
func Problems(reports []Report, fc types.NamespacedName, path string) []string {
	runners := map[string][]string{}
	for _, r := range reports {
		for _, u := range r.Unrunnable {
			if u.Namespace == fc.Namespace && u.Name == fc.Name && u.Path == path {
				runners[u.Reason] = append(runners[u.Reason], r.Runner)
			}
		}
	}
	out := make([]string, 0, len(runners))
	for reason, names := range runners {
		sort.Strings(names)
		named := strings.Join(names[:min(len(names), maxNamed)], ", ")
		if more := len(names) - maxNamed; more > 0 {
			named += fmt.Sprintf(" and %d more", more)
		}
		out = append(out, fmt.Sprintf("binaryExecutor %s: not runnable on binary-runner %s: %s", path, named, reason))
	}
	sort.Strings(out)
	return out
}
