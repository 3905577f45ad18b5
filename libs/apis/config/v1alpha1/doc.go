// Package v1alpha1 holds the config.porch.kpt.dev/v1alpha1 API: FunctionConfig
// and ServiceTemplate. The types are field-for-field compatible with porch's,
// so objects written for porch's function-runner apply unchanged; fnrunner
// adds semver constraints in tags and standard conditions in status.
//
// +kubebuilder:object:generate=true
// +groupName=config.porch.kpt.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "config.porch.kpt.dev", Version: "v1alpha1"}

// AddToScheme adds the API's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &FunctionConfig{}, &FunctionConfigList{}, &ServiceTemplate{}, &ServiceTemplateList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
