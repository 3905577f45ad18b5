package kptrender

import (
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// blueprintAnnotation is the annotation kpt fn render stamps on Config
// Connector resources it wrote, recording that kpt's function commands
// touched them (kpt v1.0.0-beta.61 internal/util/attribution); porch's
// renders, through kpt's library, stamp it too. Options.NoAttribution
// leaves it off, as KRM_DISABLE_ATTRIBUTION does for kpt.
const blueprintAnnotation = "cnrm.cloud.google.com/blueprint"

// attribute stamps n as kpt does after a render: only a Config Connector
// resource (an apiVersion with ".cnrm."), only one with metadata.
func attribute(n *yaml.RNode) error {
	if !strings.Contains(n.GetApiVersion(), ".cnrm.") || n.Field(yaml.MetadataField).IsNilOrEmpty() {
		return nil
	}
	return n.PipeE(yaml.SetAnnotation(blueprintAnnotation, recordFn(n.GetAnnotations()[blueprintAnnotation])))
}

// recordFn is kpt's recordAction for its "fn" command group: "krm-fn"
// alone, appended to a value without a krm part, or merged into the krm
// parts there are (keeping their pkg and live, kpt's order: pkg, fn, live).
// Like kpt's, the merged part grows across krm parts: a value with two
// gets the second holding both.
func recordFn(cur string) string {
	if cur == "" {
		return "krm-fn"
	}
	if !strings.Contains(cur, "krm-") {
		return cur + ",krm-fn"
	}
	parts := strings.Split(cur, ",")
	merged := []string{"krm"}
	for i, part := range parts {
		if !strings.Contains(part, "krm") {
			continue
		}
		if strings.Contains(part, "pkg") {
			merged = append(merged, "pkg")
		}
		merged = append(merged, "fn")
		if strings.Contains(part, "live") {
			merged = append(merged, "live")
		}
		parts[i] = strings.Join(merged, "-")
	}
	return strings.Join(parts, ",")
}
