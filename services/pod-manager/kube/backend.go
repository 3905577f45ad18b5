// Package kube is the pod-manager's Kubernetes side: it creates function
// pods and their Services from the templates (podcache.Backend), and turns
// pod and EndpointSlice changes into the cache's ready and failed events.
package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
)

// Labels and annotations on function pods and Services.
const (
	LabelManagedBy            = "app.kubernetes.io/managed-by"
	ManagedBy                 = "fnrunner-pod-manager"
	LabelPod                  = "fn.kpt.dev/pod" // the Service's selector: the pod's name
	LabelOwner                = "fn.kpt.dev/owner"
	AnnotationTemplateVersion = "fn.kpt.dev/template-version"
	AnnotationImage           = "fn.kpt.dev/image"
	AnnotationKey             = "fn.kpt.dev/cache-key"
)

// Spec is podcache.Function.Spec for this backend.
type Spec struct {
	// Function is the image as the call named it, parsed.
	Function imagematch.Reference
	// Image to run, pinned by digest.
	Image string
	// Entrypoint of the image, appended after "--".
	Entrypoint []string
	// Overrides from the FunctionConfig, if any.
	Overrides *v1alpha1.TemplateOverrides
	// Templates the pod and Service are made from.
	Templates *templates.Templates
	// PullSecret is added to imagePullSecrets ("" = none).
	PullSecret string
}

// ContainerImage is the function container's image: Image, with the tag
// the call named before the digest (name:tag@sha256:…). The runtime pulls
// the digest alone; the tag shows what was asked for, to an operator and
// to tools that look for a function's pods by its tag, as porch's e2e
// tests do. A pod serves every tag of its digest, and shows the first.
func (s *Spec) ContainerImage() string {
	repo, digest, pinned := strings.Cut(s.Image, "@")
	if s.Function.Tag == "" || !pinned {
		return s.Image
	}
	return repo + ":" + s.Function.Tag + "@" + digest
}

// Backend creates pods in Namespace. It implements podcache.Backend.
type Backend struct {
	Client             client.Client
	Namespace          string
	Owner              string // this replica's identity, a label on its pods
	MaxRequestBodySize int
	// MaxCallsPerPod is the most calls a pod is given at once: fnrunner's
	// wrapper-server (the default template's) gets it as its --max-queue,
	// so it never refuses a call the pod-manager sends.
	MaxCallsPerPod int
	// OnDelete, if set, is called with each pod deleted (to close its connection).
	OnDelete func(pod string)
	// PublishNotReadyAddresses sets it on every function Service, whatever
	// the ServiceTemplate says: the pod's address is published as soon as
	// it has one, so that kube-proxy's rules for it are made while its
	// containers start. For a pod-manager that asks starting pods through
	// their Services itself (Watcher.Health with ServiceDNS); it alone
	// calls them, and only after that check.
	PublishNotReadyAddresses bool
}

// Create makes the pod and its Service and returns the pod's name.
func (b *Backend) Create(ctx context.Context, f podcache.Function) (string, error) {
	spec, ok := f.Spec.(*Spec)
	if !ok {
		return "", fmt.Errorf("kube backend: unexpected spec %T", f.Spec)
	}
	tpl, err := templatemerge.Apply(&spec.Templates.Pod.Template, spec.Overrides)
	if err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		name, err := podName(spec.Function.Name)
		if err != nil {
			return "", err
		}
		pod := b.pod(name, f.Key, spec, tpl)
		err = b.Client.Create(ctx, pod)
		if apierrors.IsAlreadyExists(err) && attempt < 3 {
			continue // never reuse a live pod's name
		}
		if err != nil {
			return "", fmt.Errorf("creating pod: %w", err)
		}
		if err := b.Client.Create(ctx, b.service(pod, spec)); err != nil && !apierrors.IsAlreadyExists(err) {
			_ = b.Delete(ctx, name)
			return "", fmt.Errorf("creating service of pod %s: %w", name, err)
		}
		return name, nil
	}
}

func (b *Backend) pod(name string, key podcache.Key, spec *Spec, tpl *corev1.PodTemplateSpec) *corev1.Pod {
	labels := map[string]string{}
	for k, v := range tpl.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy], labels[LabelPod], labels[LabelOwner] = ManagedBy, name, b.Owner
	annotations := map[string]string{}
	for k, v := range tpl.Annotations {
		annotations[k] = v
	}
	annotations[AnnotationTemplateVersion] = spec.Templates.Version()
	annotations[AnnotationImage] = spec.Image
	annotations[AnnotationKey] = key.String()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace, Labels: labels, Annotations: annotations},
		Spec:       *tpl.Spec.DeepCopy(),
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != templatemerge.FunctionContainer {
			continue
		}
		c.Image = spec.ContainerImage()
		c.Args = append(c.Args, "--max-request-body-size", strconv.Itoa(b.MaxRequestBodySize))
		if ownWrapper(tpl.Spec) {
			// Only fnrunner's wrapper-server has these flags: porch's
			// templates start porch's, by the same command, and it exits
			// on a flag it does not know.
			if b.MaxCallsPerPod > 0 {
				c.Args = append(c.Args, "--max-queue", strconv.Itoa(b.MaxCallsPerPod))
			}
			// Its metrics name the calls of the image the pod is for.
			c.Args = append(c.Args, "--function-image", spec.Function.String())
		}
		c.Args = append(append(c.Args, "--"), spec.Entrypoint...)
	}
	if spec.PullSecret != "" {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: spec.PullSecret})
	}
	return pod
}

// ownWrapper says whether a pod of spec runs fnrunner's wrapper-server:
// its init container is fnrunner's wrapper-server copying itself
// (--copy-to), where porch's templates copy porch's with cp. The function
// container's command tells nothing: both are
// /wrapper-server-tools/wrapper-server.
func ownWrapper(spec corev1.PodSpec) bool {
	for _, c := range spec.InitContainers {
		for _, arg := range append(slices.Clone(c.Command), c.Args...) {
			if strings.HasPrefix(arg, "--copy-to=") {
				return true
			}
		}
	}
	return false
}

func (b *Backend) service(pod *corev1.Pod, spec *Spec) *corev1.Service {
	st := spec.Templates.Service.Template
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:        pod.Name,
			Namespace:   b.Namespace,
			Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelPod: pod.Name, LabelOwner: b.Owner},
			Annotations: st.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true),
			}},
		},
		Spec: *st.Spec.DeepCopy(),
	}
	for k, v := range st.Labels {
		if _, set := svc.Labels[k]; !set {
			svc.Labels[k] = v
		}
	}
	svc.Spec.Selector = map[string]string{LabelPod: pod.Name}
	if b.PublishNotReadyAddresses {
		svc.Spec.PublishNotReadyAddresses = true
	}
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	return svc
}

// Delete removes a pod and its Service.
func (b *Backend) Delete(ctx context.Context, name string) error {
	if b.OnDelete != nil {
		b.OnDelete(name)
	}
	meta := metav1.ObjectMeta{Name: name, Namespace: b.Namespace}
	errSvc := client.IgnoreNotFound(b.Client.Delete(ctx, &corev1.Service{ObjectMeta: meta}))
	errPod := client.IgnoreNotFound(b.Client.Delete(ctx, &corev1.Pod{ObjectMeta: meta}, client.GracePeriodSeconds(0)))
	if errPod != nil {
		return errPod
	}
	return errSvc
}

// podName is the function's name made a DNS-1035 label (the pod's Service
// carries the same name), plus a random suffix: unique, and never the name of
// a pod that is still alive. Image names may hold '_' and '.', start with a
// digit and run to hundreds of characters; the label has lowercase letters,
// digits and '-', starts with a letter and is at most 63 characters (40 of
// the name, '-', 10 of the suffix, and "fn-" when the name starts otherwise).
func podName(function string) (string, error) {
	var base strings.Builder
	dash := false
	for _, r := range strings.ToLower(function) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			base.WriteRune(r)
			dash = false
		case !dash && base.Len() > 0:
			base.WriteByte('-')
			dash = true
		}
		if base.Len() >= 40 {
			break
		}
	}
	name := strings.TrimRight(base.String(), "-")
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		name = "fn-" + name
	}
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return strings.TrimRight(name, "-") + "-" + hex.EncodeToString(b), nil
}
