package load

import (
	"fmt"
	"strings"
)

// items writes ConfigMaps of about 1 KiB each until b holds size bytes.
func items(b *strings.Builder, size int) {
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n")
	value := strings.Repeat("x", 900)
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(b, "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm-%d\n    namespace: old\n  data:\n    value: %s\n", i, value)
	}
}

// SetNamespaceInput is a ResourceList of about size bytes for set-namespace.
func SetNamespaceInput(size int) []byte {
	var b strings.Builder
	items(&b, size)
	b.WriteString("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    namespace: bench\n")
	return []byte(b.String())
}

// SetLabelsInput is a ResourceList of about size bytes for set-labels.
func SetLabelsInput(size int) []byte {
	var b strings.Builder
	items(&b, size)
	b.WriteString("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n    bench: \"yes\"\n    tier: web\n")
	return []byte(b.String())
}

// StarlarkInput is a ResourceList of about size bytes for starlark, whose
// program labels every item.
func StarlarkInput(size int) []byte {
	var b strings.Builder
	items(&b, size)
	b.WriteString(`functionConfig:
  apiVersion: fn.kpt.dev/v1alpha1
  kind: StarlarkRun
  metadata:
    name: label-everything
  source: |
    for r in ctx.resource_list["items"]:
      r["metadata"]["labels"] = {"bench": "yes"}
`)
	return []byte(b.String())
}
