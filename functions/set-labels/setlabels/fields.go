package setlabels

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/budget"
	"github.com/fnrunner/fnrunner/functions/internal/shape"
)

// setter sets one set of labels on label fields, and counts the label
// fields it visits (label keys times fields, whether a value changed or
// not), which is the number the catalog reports.
type setter struct {
	labels map[string]string
	keys   []string // the keys of labels, sorted
	count  int
	budget *budget.Budget
	// placeholder, then a label's key, stands for its value where it
	// replaces another, until settle writes it plain: a NUL and a nonce of
	// the run's, which no input holds. (The SDK gives a replacing value
	// the style of the one it replaces; the catalog's releases write it
	// plain.)
	placeholder string
	// replaced says that an object holds placeholders.
	replaced bool
}

func newSetter(labels map[string]string, b *budget.Budget) *setter {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return &setter{labels: labels, keys: keys, budget: b, placeholder: "\x00" + rand.Text() + "\x00"}
}

// settle writes the labels o's fields got in place of others as plain
// strings, keeping the comments of the values they replaced.
func (s *setter) settle(o *fn.KubeObject) {
	if !s.replaced {
		return
	}
	s.replaced = false
	rn := o.MoveToResourceNode()
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if k, ok := strings.CutPrefix(n.Value, s.placeholder); ok && n.Kind == yaml.ScalarNode {
			n.Value, n.Style, n.Tag = s.labels[k], 0, yaml.NodeTagString
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(rn.YNode())
	*o = *fn.MoveToKubeObject(rn)
}

// set sets every label in the map at path under o. A label already there
// gets the new value; a missing one is added only when create is true
// (intermediate maps are then created too). A nil o is left alone.
func (s *setter) set(o *fn.SubObject, create bool, path ...string) error {
	if o == nil {
		return nil
	}
	for _, k := range s.keys {
		if err := s.budget.Spend(visitBytes); err != nil {
			return err
		}
		field := append(slices.Clip(path), k)
		old, found, err := o.NestedString(field...)
		if err != nil {
			return err
		}
		if old == s.placeholder+k {
			// Set earlier in this run (a field visited twice).
			old = s.labels[k]
		}
		if (found && old != s.labels[k]) || (!found && create) {
			if err := s.budget.Spend(2*nodeBytes + len(k) + len(s.labels[k])); err != nil {
				return err
			}
			value := s.labels[k]
			if found {
				value, s.replaced = s.placeholder+k, true
			}
			if err := o.SetNestedString(value, field...); err != nil {
				return err
			}
		}
		s.count++
	}
	return nil
}

// setObject sets the labels on o's label fields:
//
//   - metadata.labels, on every kind (created);
//   - the selectors (see setSelectors);
//   - for kinds with a pod template (ReplicationController v1, Deployment,
//     ReplicaSet, DaemonSet, StatefulSet, Job): the template (setPodTemplate);
//   - for CronJob: the job template (setJobTemplate);
//   - for StatefulSet: each volume claim template's metadata.labels
//     (created) and selector.matchLabels (updated only; the catalog looks
//     there, not under the template's spec);
//   - for NetworkPolicy: podSelector.matchLabels of each ingress "from" and
//     egress "to" peer (updated only).
//
// As in the catalog, an error in the pod template is dropped, and the rest
// of o (a StatefulSet's volume claim templates) is then left alone; the
// budget's is not.
func (s *setter) setObject(o *fn.KubeObject) error {
	if err := s.set(&o.SubObject, true, "metadata", "labels"); err != nil {
		return err
	}
	if err := s.setSelectors(o); err != nil {
		return err
	}
	spec, err := mapAt(&o.SubObject, "spec")
	if err != nil || spec == nil {
		return err
	}
	if hasPodTemplate(o) {
		if err := s.setPodTemplate(spec, "template"); err != nil {
			if errors.Is(err, ErrTooLarge) || errors.Is(err, shape.ErrList) {
				return err
			}
			return nil
		}
	}
	if is(o, "batch", "", "CronJob") {
		if err := s.setJobTemplate(spec); err != nil {
			return err
		}
	}
	if is(o, "apps", "", "StatefulSet") {
		if err := s.setVolumeClaimTemplates(spec); err != nil {
			return err
		}
	}
	if isNetworkPolicy(o) {
		if err := s.setNetworkPolicyPeers(spec); err != nil {
			return err
		}
	}
	return nil
}

// setSelectors sets the labels on o's own selector:
//
//   - Service and ReplicationController (version v1): spec.selector (created);
//   - Deployment, ReplicaSet, DaemonSet, StatefulSet (apps):
//     spec.selector.matchLabels (created);
//   - Job (batch), PodDisruptionBudget (policy): spec.selector.matchLabels
//     (updated only);
//   - NetworkPolicy: spec.podSelector.matchLabels (updated only).
func (s *setter) setSelectors(o *fn.KubeObject) error {
	if is(o, "", "v1", "Service") || is(o, "", "v1", "ReplicationController") {
		if err := s.set(&o.SubObject, true, "spec", "selector"); err != nil {
			return err
		}
	}
	if found, create := labelSelector(o); found {
		if err := s.set(&o.SubObject, create, "spec", "selector", "matchLabels"); err != nil {
			return err
		}
	}
	if isNetworkPolicy(o) {
		return s.set(&o.SubObject, false, "spec", "podSelector", "matchLabels")
	}
	return nil
}

// labelSelector says whether o has a spec.selector.matchLabels the
// labels go to, and whether it is created when missing.
func labelSelector(o *fn.KubeObject) (found, create bool) {
	switch {
	case is(o, "", "", "Deployment"), is(o, "", "", "ReplicaSet"),
		is(o, "", "", "DaemonSet"), is(o, "apps", "", "StatefulSet"):
		return true, true
	case is(o, "batch", "", "Job"), is(o, "policy", "", "PodDisruptionBudget"):
		return true, false
	default:
		return false, false
	}
}

// hasPodTemplate says whether o's spec.template is a pod template.
func hasPodTemplate(o *fn.KubeObject) bool {
	return is(o, "", "v1", "ReplicationController") ||
		is(o, "", "", "Deployment") ||
		is(o, "", "", "ReplicaSet") ||
		is(o, "", "", "DaemonSet") ||
		is(o, "apps", "", "StatefulSet") ||
		is(o, "batch", "", "Job")
}

func isNetworkPolicy(o *fn.KubeObject) bool {
	return is(o, "networking.k8s.io", "", "NetworkPolicy")
}

// setPodTemplate sets the labels on the pod template at parent's field k:
// metadata.labels (created) and the selectors of its spec (setPodSpec).
func (s *setter) setPodTemplate(parent *fn.SubObject, k string) error {
	pod, err := mapAt(parent, k)
	if err != nil || pod == nil {
		return err
	}
	if err := s.set(pod, true, "metadata", "labels"); err != nil {
		return err
	}
	spec, err := mapAt(pod, "spec")
	if err != nil || spec == nil {
		return err
	}
	return s.setPodSpec(spec)
}

// setPodSpec updates (never creates) the labels of a pod spec's label
// selectors: labelSelector.matchLabels of each topology spread constraint
// and, the way the catalog reads affinity, of the terms listed directly
// under spec.affinity (preferredDuringSchedulingIgnoredDuringExecution[]
// .podAffinityTerm and requiredDuringSchedulingIgnoredDuringExecution[]),
// once for each of affinity.podAffinity and affinity.podAntiAffinity that
// is present. The terms of podAffinity and podAntiAffinity themselves are
// not updated.
func (s *setter) setPodSpec(spec *fn.SubObject) error {
	for _, c := range spec.GetSlice("topologySpreadConstraints") {
		if err := s.set(c, false, "labelSelector", "matchLabels"); err != nil {
			return err
		}
	}
	affinity, err := mapAt(spec, "affinity")
	if err != nil || affinity == nil {
		return err
	}
	for _, kind := range []string{"podAffinity", "podAntiAffinity"} {
		if affinity.GetMap(kind) == nil {
			continue
		}
		for _, term := range affinity.GetSlice("preferredDuringSchedulingIgnoredDuringExecution") {
			t, err := mapAt(term, "podAffinityTerm")
			if err != nil {
				return err
			}
			if err := s.set(t, false, "labelSelector", "matchLabels"); err != nil {
				return err
			}
		}
		for _, term := range affinity.GetSlice("requiredDuringSchedulingIgnoredDuringExecution") {
			if err := s.set(term, false, "labelSelector", "matchLabels"); err != nil {
				return err
			}
		}
	}
	return nil
}

// setJobTemplate sets the labels on a CronJob's job template (the
// jobTemplate of its spec): metadata.labels (created),
// spec.selector.matchLabels (updated only) and the pod template at
// spec.template.
func (s *setter) setJobTemplate(cronSpec *fn.SubObject) error {
	job, err := mapAt(cronSpec, "jobTemplate")
	if err != nil || job == nil {
		return err
	}
	if err := s.set(job, true, "metadata", "labels"); err != nil {
		return err
	}
	spec, err := mapAt(job, "spec")
	if err != nil || spec == nil {
		return err
	}
	if err := s.set(spec, false, "selector", "matchLabels"); err != nil {
		return err
	}
	return s.setPodTemplate(spec, "template")
}

// setVolumeClaimTemplates sets the labels on each of a StatefulSet's
// volume claim templates.
func (s *setter) setVolumeClaimTemplates(spec *fn.SubObject) error {
	templates, _, err := spec.NestedSlice("volumeClaimTemplates")
	if err != nil {
		return err
	}
	for _, t := range templates {
		if err := s.set(t, true, "metadata", "labels"); err != nil {
			return err
		}
		if err := s.set(t, false, "selector", "matchLabels"); err != nil {
			return err
		}
	}
	return nil
}

// setNetworkPolicyPeers updates the pod selectors of a NetworkPolicy's
// ingress and egress peers.
func (s *setter) setNetworkPolicyPeers(spec *fn.SubObject) error {
	for _, rules := range [][2]string{{"ingress", "from"}, {"egress", "to"}} {
		for _, rule := range spec.GetSlice(rules[0]) {
			for _, peer := range rule.GetSlice(rules[1]) {
				if err := s.set(peer, false, "podSelector", "matchLabels"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// mapAt is o.GetMap(k), the way the catalog reads the maps it walks
// (nil when k is missing; a scalar is read as an empty map), but a list
// is an error wrapping shape.ErrList (see package shape).
func mapAt(o *fn.SubObject, k string) (*fn.SubObject, error) {
	if shape.IsList(o, k) {
		return nil, fmt.Errorf("%s: %w", k, shape.ErrList)
	}
	return o.GetMap(k), nil
}

// is says whether o is of the given group, version and kind, the way the
// catalog matches kinds: an empty field, in the arguments or in o, matches
// anything (so a core-group object matches any group).
func is(o *fn.KubeObject, group, version, kind string) bool {
	gvk := o.GroupVersionKind()
	matches := func(want, got string) bool { return want == "" || got == "" || want == got }
	return matches(group, gvk.Group) && matches(version, gvk.Version) && matches(kind, gvk.Kind)
}
