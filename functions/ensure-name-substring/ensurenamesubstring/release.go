package ensurenamesubstring

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
)

// release is what differs between the catalog behaviours the package
// answers as.
type release struct {
	// keepsKptfiles leaves the Kptfile's name alone.
	keepsKptfiles bool
	// dependsOn updates depends-on references to renamed resources.
	dependsOn bool
	// cleared are the annotations cleared from every resource on the way
	// out.
	cleared []string
	// parseConfig reads the functionConfig.
	parseConfig func(*fn.KubeObject) (*Config, error)
	// results says whether a failure adds an error result; without it,
	// the failure is the error alone (the process's exit code and log).
	results bool
	// passesNameless passes items without a kind or a metadata.name
	// through untouched (a kustomization.yaml, say), where later releases
	// refuse them.
	passesNameless bool
	// unreferred says which referrer fields of kustomize's name reference
	// table (NameReferenceSpecs) the release's table lacks.
	unreferred func(types.FieldSpec) bool
}

// v011 is ensure-name-substring v0.1.1 (catalog tag
// ensure-name-substring/v0.1.1, 2021-06-22, on kustomize api v0.8.11 and
// kyaml v0.10.21's framework): every resource but CustomResourceDefinitions,
// APIServices and Namespaces is renamed, the Kptfile too; kustomize's own
// build annotations are cleared and kpt's are kept, so that each resource
// stays in its file; depends-on annotations are left as they are; a bad
// functionConfig fails the run with the framework's message and no result.
func v011() release {
	return release{cleared: kustomizeAnnotations(), parseConfig: parseConfigV011, passesNameless: true, unreferred: notInV0811}
}

// notInV0811 says which referrers of kustomize api v0.20.1's name
// reference table v0.8.11's, which v0.1.1 was built on, lacks: a
// PodTemplate's references to ConfigMaps and Secrets, and a
// ValidatingAdmissionPolicyBinding's policy. (Read from the two modules'
// tables; testdata/v0.1.1/pod-templates holds the release's answer.)
func notInV0811(fs types.FieldSpec) bool {
	return fs.Kind == "PodTemplate" || fs.Kind == "ValidatingAdmissionPolicyBinding"
}

// unstable is the catalog's function at commit 76fe381 (see the package
// comment), which the conformance corpus records under the :unstable tag.
func unstable() release {
	return release{keepsKptfiles: true, dependsOn: true, cleared: resource.BuildAnnotations, parseConfig: ParseConfig, results: true,
		unreferred: func(types.FieldSpec) bool { return false }}
}

// kustomizeAnnotations are kustomize's build annotations without kpt's (the
// file, index, indent and id annotations), which kustomize api v0.8.11
// did not clear.
func kustomizeAnnotations() []string {
	kpt := map[string]bool{
		kioutil.PathAnnotation: true, kioutil.IndexAnnotation: true, kioutil.SeqIndentAnnotation: true,
		kioutil.IdAnnotation: true, kioutil.InternalAnnotationsMigrationResourceIDAnnotation: true,
		//lint:ignore SA1019 kpt still sends the legacy annotations, and v0.1.1 keeps them.
		kioutil.LegacyPathAnnotation: true, kioutil.LegacyIndexAnnotation: true, kioutil.LegacyIdAnnotation: true,
	}
	var out []string
	for _, a := range resource.BuildAnnotations {
		if !kpt[a] {
			out = append(out, a)
		}
	}
	return out
}

// errLoadConfig prefixes v0.1.1's functionConfig errors, as its framework
// words them.
var errLoadConfig = errors.New("failed to load the `functionConfig`")

// parseConfigV011 reads the functionConfig as v0.1.1 does: a ConfigMap of
// exactly one entry, prepend or append; or an EnsureNameSubstring whose
// editMode defaults to prepend and whose fieldSpecs, when
// additionalNameFields is not set, are its additionalNameFields. An
// EnsureNameSubstring's editMode is not checked: with another, no name
// changes.
func parseConfigV011(o *fn.KubeObject) (*Config, error) {
	cfg, err := configV011(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errLoadConfig, err)
	}
	return cfg, nil
}

func configV011(o *fn.KubeObject) (*Config, error) {
	var cfg *Config
	switch {
	case o == nil || o.IsEmpty():
		cfg = &Config{EditMode: Prepend}
	case o.GetAPIVersion() == "v1" && o.GetKind() == "ConfigMap":
		data, _, err := o.NestedStringMap("data")
		if err != nil {
			return nil, err
		}
		if len(data) != 1 {
			return nil, fmt.Errorf("only 1 entry is allowed in the ConfigMap, but got: %d", len(data))
		}
		for k, v := range data {
			if mode := EditMode(k); mode != Prepend && mode != Append {
				return nil, fmt.Errorf("unknown editMode: %v, only %v and %v are allowed", k, Prepend, Append)
			}
			cfg = &Config{Substring: v, EditMode: EditMode(k)}
		}
	case o.GetAPIVersion() == ConfigAPIVersion && o.GetKind() == ConfigKind:
		c, err := decodeCustom(o)
		if err != nil {
			return nil, err
		}
		if c.AdditionalNameFields != nil && c.FieldSpecs != nil {
			return nil, errors.New("`fieldSpecs` has been deprecated, please rename it to `additionalNameFields`")
		}
		cfg = &Config{Substring: c.Substring, EditMode: c.EditMode, AdditionalNameFields: c.AdditionalNameFields}
		if c.AdditionalNameFields == nil {
			cfg.AdditionalNameFields = c.FieldSpecs
		}
		if cfg.EditMode == "" {
			cfg.EditMode = Prepend
		}
	default:
		return nil, fmt.Errorf("function config must be either /v1, Kind=ConfigMap or %s, Kind=%s, but we got: %s, Kind=%s",
			ConfigAPIVersion, ConfigKind, apiVersionOf(o.GetAPIVersion()), o.GetKind())
	}
	if cfg.Substring == "" {
		return nil, errors.New("substring must not be empty")
	}
	if err := checkPaths(cfg.AdditionalNameFields); err != nil {
		return nil, err
	}
	return cfg, nil
}

// apiVersionOf writes an apiVersion as schema.GroupVersion does in a
// GroupVersionKind: "/v1" for the core group.
func apiVersionOf(apiVersion string) string {
	if strings.Contains(apiVersion, "/") {
		return apiVersion
	}
	return "/" + apiVersion
}
