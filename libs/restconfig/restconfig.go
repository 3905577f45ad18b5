// Package restconfig finds the Kubernetes client configuration of a service:
// --kubeconfig when given, else in-cluster, $KUBECONFIG or ~/.kube/config.
package restconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Load returns the configuration from kubeconfig, or the default one.
func Load(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes configuration (use --kubeconfig): %w", err)
	}
	return cfg, nil
}
