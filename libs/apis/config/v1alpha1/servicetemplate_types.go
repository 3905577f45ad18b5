package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceTemplate is the template of the Service created beside each function
// pod (porch uses one, "base-service-template", in the pod namespace).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=servicetemplates,singular=servicetemplate
type ServiceTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Template is the Service's metadata and spec.
	Template ServiceTemplateSpec `json:"template,omitempty"`
}

// ServiceTemplateSpec is a Service's metadata and spec.
type ServiceTemplateSpec struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              corev1.ServiceSpec `json:"spec,omitempty"`
}

// ServiceTemplateList is a list of ServiceTemplates.
//
// +kubebuilder:object:root=true
type ServiceTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ServiceTemplate `json:"items"`
}
