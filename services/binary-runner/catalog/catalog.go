// Package catalog lists the KRM catalog functions the binary-runner's go
// executor serves. Those whose work is bounded by their input are linked in
// and run in-process, each the function's own processor run exactly as its
// binary runs it (fn.Run, as fn.AsMain does); the others run as their
// binaries, each call in a process of its own, under the sandbox and the
// call's memory bound, killed at its deadline.
//
// In process, a call cannot be stopped (Go cannot stop a goroutine) and
// shares the runner's memory; so a function runs there only when its work
// is linear in its input, or checked against a budget computed from its
// input before it is done. set-namespace walks each resource once, a
// RoleBinding's subjects once each, and follows no alias (yaml.v3, which
// decodes its functionConfig, refuses excessive aliasing); fnrunner's own
// six functions spend budgets. apply-setters and apply-replacements are not
// bounded by their input: one value referenced many times, or copied into
// many targets, turns 100 KB into a gigabyte; apply-setters matches each
// field's value against a regular expression with a group per setter
// reference, array values are parsed again for every field they are set
// in, and its work can outlive the call. A budget simulating apply-setters
// was tried and attacked, and missed all three. They run as their
// binaries, where the call's memory bound and deadline end them: 2 ms a
// 2.5 KB call in process against 50 ms in a process of its own (no
// sandbox, kyaml's start dominates; 2026-12-01).
//
// Functions (functions.go) is written by tools/fnregistry from
// functions/registry.yaml.
package catalog

import "github.com/kptdev/krm-functions-sdk/go/fn"

// Function is one linked-in catalog function.
type Function struct {
	// Version of the catalog module it is built from.
	Version string
	// Process is its ResourceList processor, run in-process; nil when
	// Binary is set.
	Process fn.ResourceListProcessorFunc
	// Binary, when set, is the function's binary in the binary-runner's
	// functions directory, run in its own process as the binary executor
	// runs binaries.
	Binary string
	// Script says that Binary runs user scripts and takes the runner's
	// bounds for them (functions/starlark/bounds) as arguments.
	Script bool
}
