package kube_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fnrunner/fnrunner/libs/imagematch"
	"github.com/fnrunner/fnrunner/services/pod-manager/kube"
)

func TestContainerImageShowsTheTagBeforeTheDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ image, want string }{
		{"r.example/fns/sleep:latest", "r.example/fns/sleep:latest@" + digest},
		{"r.example/fns/sleep:v1.2@" + digest, "r.example/fns/sleep:v1.2@" + digest},
		{"r.example/fns/sleep@" + digest, "r.example/fns/sleep@" + digest},
	} {
		ref, err := imagematch.Parse(tc.image, "")
		assert.NoError(t, err, tc.image)
		spec := &kube.Spec{Function: ref, Image: ref.Repository() + "@" + digest}
		assert.Equal(t, tc.want, spec.ContainerImage(), tc.image)
	}
}
