package kptrender

import (
	"bytes"
	"path"

	"github.com/kptdev/kpt/pkg/lib/builtins/builtintypes"
	"github.com/kptdev/kpt/pkg/lib/runneroptions"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// builtinPkgContext is the image of kpt's builtin function that makes a
// package's package-context.yaml; kpt fn render runs it in process, never
// as an image, and so does Render.
const builtinPkgContext = runneroptions.FuncGenPkgContext

// genPkgContext runs kpt's builtin builtins/gen-pkg-context on a
// ResourceList (kpt v1.0.0-beta.61 internal/builtins, which cannot be
// imported: its one exported door prints to stdout): existing package
// contexts are dropped, and beside the package's own Kptfile a ConfigMap
// kptfile.kpt.dev with the package's name is added, with an info result.
func genPkgContext(input []byte) ([]byte, error) {
	var out bytes.Buffer
	rw := &kio.ByteReadWriter{Reader: bytes.NewReader(input), Writer: &out, KeepReaderAnnotations: true}
	if err := framework.Execute(framework.ResourceListProcessorFunc(processPkgContext), rw); err != nil {
		return out.Bytes(), err
	}
	return out.Bytes(), nil
}

func processPkgContext(rl *framework.ResourceList) error {
	var contexts, items []*yaml.RNode
	for _, r := range rl.Items {
		if r.GetApiVersion() == "v1" && r.GetKind() == "ConfigMap" && r.GetName() == builtintypes.PkgContextName {
			continue
		}
		items = append(items, r)
		if r.GetApiVersion() != "kpt.dev/v1" || r.GetKind() != "Kptfile" {
			continue
		}
		p, _, err := kioutil.GetFileAnnotations(r)
		if err != nil {
			rl.Results = framework.Results{{Message: err.Error(), Severity: framework.Error}}
			return rl.Results
		}
		// kpt's test for the package's own Kptfile; while a tree renders a
		// subpackage's Kptfile is at "Kptfile" of its own package too.
		if p != "Kptfile" {
			continue
		}
		cm := yaml.MustParse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + builtintypes.PkgContextName + "\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\ndata:\n  name: example\n")
		if err := cm.PipeE(yaml.SetAnnotation(kioutil.PathAnnotation, path.Join(path.Dir(p), builtintypes.PkgContextFile))); err != nil {
			return err
		}
		cm.SetDataMap(map[string]string{"name": r.GetName()})
		contexts = append(contexts, cm)
	}
	for _, cm := range contexts {
		items = append(items, cm)
		p, _, _ := kioutil.GetFileAnnotations(cm)
		rl.Results = append(rl.Results, &framework.Result{
			Message:  "generated package context",
			Severity: framework.Info,
			File:     &framework.File{Path: p, Index: 0},
		})
	}
	rl.Items = items
	return nil
}
