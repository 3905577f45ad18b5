package setannotations

import (
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
)

// release is what differs between the catalog behaviours the package
// answers as.
type release struct {
	// reports says whether a run reports what it set as results.
	reports bool
	// replacesResults: a failure's result replaces the input's results,
	// and a run that fails after reading its config answers no items, as
	// kyaml v0.10's framework writes them. Otherwise the result is added
	// and the items are left as they came.
	replacesResults bool
	// quotesOnce double-quotes a value YAML 1.1 reads as no string only
	// when its node is made: a plain value it replaces leaves it plain in
	// the fields set after (kustomize api v0.8.11 on kyaml v0.10.21).
	quotesOnce bool
	// readsNameless reads items without checking that each has a kind
	// and a metadata.name (kustomize api v0.8.11 with local configs
	// included), and words a repeated resource id as kyaml v0.10 did.
	readsNameless bool
	// logsResult: a failure's log is its error result, as kyaml v0.10's
	// framework printed it ("[error] : <message>"), in place of
	// fn.AsMain's "failed to evaluate function: ...".
	logsResult bool
	// decodesPlugin: a config is decoded into a type named plugin, as
	// v0.1.4's kustomize plugin was, so that a decode error names
	// "plugin.annotations".
	decodesPlugin bool
}

// v014 is set-annotations v0.1.4 (catalog tag go/set-annotations/v0.1.4,
// 2021-06-22, on kustomize api v0.8.11 and kyaml v0.10.21's framework):
// no result on success; a failure is its one error result; items without
// a kind or name (a kustomization.yaml, say) are annotated too; a value
// YAML 1.1 reads as no string may stay plain (see quotesOnce).
func v014() release {
	return release{replacesResults: true, quotesOnce: true, readsNameless: true, logsResult: true, decodesPlugin: true}
}

// unstable is the catalog's function at commit 76fe381 (see the package
// comment), which the conformance corpus records under the :unstable tag.
func unstable() release {
	return release{reports: true}
}

// fail records err, the run's failure, in rl, and returns the error the
// run returns with; failedRun says that the config was read and the run
// itself failed.
func (rel release) fail(rl *fn.ResourceList, err error, failedRun bool) error {
	if !rel.replacesResults {
		rl.Results = append(rl.Results, fn.ErrorResult(err))
	} else {
		rl.Results = fn.Results{fn.ErrorResult(err)}
		if failedRun {
			rl.Items = nil
		}
	}
	if rel.logsResult {
		return exitlog.ErrorResult(err)
	}
	return nil
}

// legacyID writes id as kyaml v0.10's ResId.String did:
// group_version_kind|namespace|name, "~G", "~V", "~K", "~X" and "~N"
// standing for an empty one.
func legacyID(id resid.ResId) string {
	or := func(s, empty string) string {
		if s == "" {
			return empty
		}
		return s
	}
	gvk := strings.Join([]string{or(id.Group, "~G"), or(id.Version, "~V"), or(id.Kind, "~K")}, "_")
	return strings.Join([]string{gvk, or(id.Namespace, "~X"), or(id.Name, "~N")}, "|")
}

// resourcesOf wraps nodes as kustomize resources without checking their
// kind and name, dropping empty ones, as kustomize api v0.8.11's factory
// does with local configs included.
func resourcesOf(nodes []*yaml.RNode) []*resource.Resource {
	out := make([]*resource.Resource, 0, len(nodes))
	for _, n := range nodes {
		if n.IsNilOrEmpty() {
			continue
		}
		out = append(out, &resource.Resource{RNode: *n})
	}
	return out
}
