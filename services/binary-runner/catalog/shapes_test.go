package catalog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// shapeItems are resources with every field the linked-in functions walk:
// pod templates with selectors, affinity and spread constraints, a job
// template, volume claim templates, network policy peers, role binding
// subjects, a Kptfile and a ConfigMap.
const shapeItems = `- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
    namespace: old
    labels: {app: web}
    annotations: {a: b}
  spec:
    selector:
      matchLabels: {app: web}
    template:
      metadata:
        labels: {app: web}
      spec:
        containers:
        - name: web
          image: nginx:1.0
        initContainers:
        - name: init
          image: busybox
        topologySpreadConstraints:
        - labelSelector:
            matchLabels: {app: web}
        affinity:
          podAffinity: {}
          preferredDuringSchedulingIgnoredDuringExecution:
          - podAffinityTerm:
              labelSelector:
                matchLabels: {app: web}
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels: {app: web}
- apiVersion: batch/v1
  kind: CronJob
  metadata:
    name: job
  spec:
    jobTemplate:
      metadata:
        labels: {app: web}
      spec:
        selector:
          matchLabels: {app: web}
        template:
          metadata:
            labels: {app: web}
          spec:
            containers:
            - name: job
              image: nginx:1.0
- apiVersion: apps/v1
  kind: StatefulSet
  metadata:
    name: db
  spec:
    selector:
      matchLabels: {app: db}
    template:
      spec:
        containers:
        - name: db
          image: nginx:1.0
    volumeClaimTemplates:
    - metadata:
        labels: {app: db}
      selector:
        matchLabels: {app: db}
- apiVersion: networking.k8s.io/v1
  kind: NetworkPolicy
  metadata:
    name: np
  spec:
    podSelector:
      matchLabels: {app: web}
    ingress:
    - from:
      - podSelector:
          matchLabels: {app: web}
    egress:
    - to:
      - podSelector:
          matchLabels: {app: web}
- apiVersion: v1
  kind: Service
  metadata:
    name: web
  spec:
    selector: {app: web}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata:
    name: rb
    namespace: old
  roleRef:
    kind: Role
    name: web
  subjects:
  - kind: ServiceAccount
    name: web
    namespace: old
- apiVersion: kpt.dev/v1
  kind: Kptfile
  metadata:
    name: pkg
    annotations:
      config.kubernetes.io/path: Kptfile
  info:
    description: d
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: web
    annotations:
      config.kubernetes.io/path: cm.yaml
      config.kubernetes.io/index: '0'
  data: {a: web}
`

// shapeConfigs are a functionConfig for each linked-in function that makes
// it walk shapeItems.
var shapeConfigs = map[string]string{
	"ensure-name-substring":          "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  prepend: p-\n",
	"ensure-name-substring-unstable": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  prepend: p-\n",
	"search-replace":                 "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  by-value: web\n  put-value: new\n",
	"set-annotations":                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: c\n",
	"set-annotations-unstable":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: c\n",
	"set-image":                      "apiVersion: fn.kpt.dev/v1alpha1\nkind: SetImage\nmetadata:\n  name: c\nimage:\n  name: nginx\n  newName: nginx2\n  newTag: '2.0'\n",
	"set-labels":                     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  app: new\n",
	"set-namespace":                  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  namespace: new\n",
	"upsert-resource":                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  a: new\n",
}

// shapeValues replace one value at a time: an odd-length list where a map
// is expected is what once ended the process (the SDK's log.Fatalf), and
// the others are every other kind a field can be.
var shapeValues = []string{"[x]", "[a, b]", "[[x]]", "x", "null", "{}", "{a: b}", "[{a: b}]"}

// shapeCases are the inputs of the shape test: shapeItems and config in a
// ResourceList, then each with one value, in the items or the config,
// replaced by each of shapeValues. Each case is named by the path of the
// value replaced.
func shapeCases(t testing.TB, config string) (names, inputs []string) {
	t.Helper()
	doc := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n" + shapeItems +
		"functionConfig:\n" + indent(config)
	root, err := yaml.Parse(doc)
	require.NoError(t, err)
	names, inputs = append(names, "unchanged"), append(inputs, doc)
	var paths [][]int
	var walk func(n *yaml.Node, at []int)
	walk = func(n *yaml.Node, at []int) {
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 {
				continue
			}
			here := append(slices.Clip(at), i)
			if len(here) > 1 { // not the header or items itself
				paths = append(paths, here)
			}
			walk(c, here)
		}
	}
	walk(root.YNode(), nil)
	for _, p := range paths {
		for _, v := range shapeValues {
			mutated := root.Copy()
			n, name := mutated.YNode(), ""
			for _, i := range p[:len(p)-1] {
				if n.Kind == yaml.MappingNode {
					name += "." + n.Content[i-1].Value
				} else {
					name += fmt.Sprintf("[%d]", i)
				}
				n = n.Content[i]
			}
			last := p[len(p)-1]
			if n.Kind == yaml.MappingNode {
				name += "." + n.Content[last-1].Value
			} else {
				name += fmt.Sprintf("[%d]", last)
			}
			repl, err := yaml.Parse(v)
			require.NoError(t, err)
			n.Content[last] = repl.YNode()
			out, err := mutated.String()
			require.NoError(t, err)
			names, inputs = append(names, name[1:]+" = "+v), append(inputs, out)
		}
	}
	return names, inputs
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// shapesChild is set in the process TestEveryShapeIsAnswered starts.
const shapesChild = "FNRUNNER_SHAPES_CHILD"

// TestEveryShapeIsAnswered runs every linked-in function on its input with
// each value replaced by a value of every other shape, and requires each
// run to end with output or an error. No run may end the process (the
// binary-runner serves every call in it), and none may panic: the go
// executor answers a panic as a failed run, but its message is a stack.
// The runs are made in a process of this test binary's, which says each
// case before running it, so a run that ends it is named.
func TestEveryShapeIsAnswered(t *testing.T) {
	if os.Getenv(shapesChild) != "" {
		runShapes(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEveryShapeIsAnswered$")
	cmd.Env = append(os.Environ(), shapesChild+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var last string
	var panics []string
	runs := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if c, ok := strings.CutPrefix(line, "case: "); ok {
			last, runs = c, runs+1
		}
		if p, ok := strings.CutPrefix(line, "panic: "); ok {
			panics = append(panics, p)
		}
	}
	err = cmd.Wait()
	require.NoError(t, err, "the process ended in case %q:\n%s", last, stderr.String())
	t.Logf("%d runs", runs)
	assert.Greater(t, runs, 1000, "the cases were not all run")
	assert.Empty(t, panics, "runs that panicked: the go executor answers them, but with a stack, not a message")
}

func runShapes(t *testing.T) {
	ids := make([]string, 0, len(shapeConfigs))
	for id := range shapeConfigs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	w := bufio.NewWriter(os.Stdout)
	for _, id := range ids {
		f, ok := Functions()[id]
		require.True(t, ok, id)
		require.NotNil(t, f.Process, id)
		names, inputs := shapeCases(t, shapeConfigs[id])
		for i, input := range inputs {
			fmt.Fprintf(w, "case: %s: %s\n", id, names[i])
			require.NoError(t, w.Flush())
			if v := runRecovered(f.Process, input); v != nil {
				fmt.Fprintf(w, "panic: %s: %s: %v\n", id, names[i], v)
			}
		}
	}
	require.NoError(t, w.Flush())
}

// runRecovered runs p as the go executor does, and returns what it
// panicked with, if it did.
func runRecovered(p fn.ResourceListProcessorFunc, input string) (v any) {
	defer func() { v = recover() }()
	_, _ = fn.Run(p, []byte(input))
	return nil
}

// Every linked-in function is in the shape test.
func TestShapeConfigsNameEveryLinkedInFunction(t *testing.T) {
	for id, f := range Functions() {
		if f.Process != nil {
			assert.Contains(t, shapeConfigs, id, "no functionConfig for %s in the shape test", id)
		}
	}
}
