package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FunctionConfig says how a KRM function image is run: in pods, as a binary,
// or in-process as Go, and for which registry prefixes and tags.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=functionconfigs,singular=functionconfig
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Server Applied",type=integer,JSONPath=`.status.apiServerObservedGeneration`
// +kubebuilder:printcolumn:name="FnRunner Applied",type=integer,JSONPath=`.status.functionRunnerObservedGeneration`
// +kubebuilder:printcolumn:name="Controller Applied",type=integer,JSONPath=`.status.controllerObservedGeneration`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FunctionConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionConfigSpec   `json:"spec,omitempty"`
	Status FunctionConfigStatus `json:"status,omitempty"`
}

// FunctionConfigList is a list of FunctionConfigs.
//
// +kubebuilder:object:root=true
type FunctionConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []FunctionConfig `json:"items"`
}

// FunctionConfigSpec is the desired configuration of one function image.
//
// +kubebuilder:validation:XValidation:message="At least one configuration must be specified",rule="has(self.podExecutor) || has(self.binaryExecutor) || has(self.goExecutor)"
type FunctionConfigSpec struct {
	// Image is the function's name without registry or tag, e.g. "set-namespace".
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Prefixes are the registry prefixes the image is served under, e.g.
	// "ghcr.io/kptdev/krm-functions-catalog". "" stands for the default prefix
	// (--default-image-prefix). No prefixes means the default prefix only.
	Prefixes []string `json:"prefixes,omitempty"`
	// PodExecutor runs the function in pods.
	PodExecutor *PodExecutorConfig `json:"podExecutor,omitempty"`
	// BinaryExecutor runs a function binary from the functions directory.
	BinaryExecutor *BinaryExecutorConfig `json:"binaryExecutor,omitempty"`
	// GoExecutor runs a function linked into the runner, in-process.
	GoExecutor *GoExecutorConfig `json:"goExecutor,omitempty"`
}

// PodExecutorConfig configures the pods that run a function.
type PodExecutorConfig struct {
	// Tags this configuration applies to: exact tags ("v0.4.5") or semver
	// constraints ("~0.4", ">=0.2.0 <0.3.0"). Empty means every tag.
	Tags []string `json:"tags,omitempty"`
	// TimeToLive is how long an idle pod is kept.
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:Format=duration
	TimeToLive metav1.Duration `json:"timeToLive,omitempty"`
	// MaxParallelExecutions is the most pods run for the function at once
	// (0: the --max-parallel-pods-per-function default).
	// +kubebuilder:validation:Minimum=0
	MaxParallelExecutions int `json:"maxParallelExecutions,omitempty"`
	// PreferredMaxQueueLength is the load per pod (calls running and waiting)
	// at which another pod is started (0: the --max-waitlist-length default).
	// +kubebuilder:validation:Minimum=0
	PreferredMaxQueueLength int `json:"preferredMaxQueueLength,omitempty"`
	// TemplateOverrides are merged into the pod template for this function.
	TemplateOverrides *TemplateOverrides `json:"templateOverrides,omitempty"`
}

// TemplateOverrides are per-function changes to the base pod template.
type TemplateOverrides struct {
	ServiceAccountName string                     `json:"serviceAccountName,omitempty"`
	SecurityContext    *corev1.PodSecurityContext `json:"securityContext,omitempty"`
	InitContainer      *ContainerOverrides        `json:"initContainer,omitempty"`
	Container          *ContainerOverrides        `json:"container,omitempty"`
}

// ContainerOverrides change one container of the pod template. Env entries
// are merged by name into the template's.
type ContainerOverrides struct {
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	EnvFrom   []corev1.EnvFromSource       `json:"envFrom,omitempty"`
	Env       []corev1.EnvVar              `json:"env,omitempty"`
}

// BinaryExecutorConfig maps tags of the image onto a function binary.
type BinaryExecutorConfig struct {
	// Tags run by the binary: exact tags or semver constraints.
	// +kubebuilder:validation:MinItems=1
	Tags []string `json:"tags"`
	// Path of the binary: absolute, or relative to the runner's --functions directory.
	// +kubebuilder:validation:MinLength=1
	Path string `json:"path"`
}

// GoExecutorConfig maps tags of the image onto a function linked into the runner.
type GoExecutorConfig struct {
	// Tags run in-process: exact tags or semver constraints.
	// +kubebuilder:validation:MinItems=1
	Tags []string `json:"tags"`
	// ID is the name the function is registered under in the runner; empty
	// means spec.image.
	ID *string `json:"id,omitempty"`
}

// FunctionConfigStatus is what each component last applied.
type FunctionConfigStatus struct {
	// ApiServerObservedGeneration is the generation porch-server last applied.
	ApiServerObservedGeneration int64 `json:"apiServerObservedGeneration,omitempty"` //nolint:revive // porch's field name
	// FunctionRunnerObservedGeneration is the generation the function runner
	// (fnrunner's config-reconciler) last applied.
	FunctionRunnerObservedGeneration int64 `json:"functionRunnerObservedGeneration,omitempty"`
	// ControllerObservedGeneration is the generation porch's controllers last applied.
	ControllerObservedGeneration int64 `json:"controllerObservedGeneration,omitempty"`
	// Error is set when the function runner could not apply the spec, and
	// cleared when it could.
	Error string `json:"error,omitempty"`
	// Conditions: Ready (the executor table holds this config) and Conflict
	// (another FunctionConfig claims the same image, prefix, tag and executor).
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of FunctionConfig.
const (
	// ConditionReady is True when the function runner applied the spec.
	ConditionReady = "Ready"
	// ConditionConflict is True when another FunctionConfig claims the same
	// image, prefix, tag and executor; neither of the two is used for it.
	ConditionConflict = "Conflict"
)
