package server

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/imagemeta"
	"github.com/fnrunner/fnrunner/libs/sendonce"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
	"github.com/fnrunner/fnrunner/services/pod-manager/templates"
	"github.com/fnrunner/fnrunner/tests/testregistry"
)

type fixedTables struct{ t *executortable.Tables }

func (f fixedTables) Tables() *executortable.Tables { return f.t }

func (f fixedTables) Await(context.Context, time.Duration) *executortable.Tables { return f.t }

// noPods is a pod cache that has no pod to give: the calls here must fail
// before they ask for one, or wait for one until their deadline.
type noPods struct{}

func (noPods) Acquire(ctx context.Context, _ podcache.Function) (*podcache.Lease, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (noPods) PodFailed(string, error) {}

// Each failure before a pod is reached gets the gRPC code its type says,
// through the real image resolver and a real registry on loopback.
func TestFailuresBeforeThePodAreMappedByType(t *testing.T) {
	reg := testregistry.New(t)
	prefix := reg.Host + "/fns"
	reg.Push(t, prefix+"/fn:v1", v1.Config{Entrypoint: []string{"/fn"}})
	reg.Push(t, prefix+"/no-entrypoint:v1", v1.Config{})
	reg.Push(t, prefix+"/with-secret:v1", v1.Config{Entrypoint: []string{"/fn"}})
	resolver := func(user, password string) *imagemeta.Resolver {
		r, err := imagemeta.New(imagemeta.Options{DockerConfigPath: reg.DockerConfig(t, user, password), CAPaths: []string{reg.CAFile},
			AllowedRegistries: []string{reg.Host, "127.0.0.1:1"}})
		require.NoError(t, err)
		return r
	}
	good := resolver(testregistry.User, testregistry.Password)
	tables := executortable.Build(&configpb.Snapshot{DefaultImagePrefix: prefix, Functions: []*configpb.FunctionConfig{{
		Namespace: "ns", Name: "claimed", Image: "claimed", Prefixes: []string{""},
		Pod: &configpb.PodExecutor{Tags: []string{"v1"}, TemplateOverridesJson: []byte(`{"container": 7}`)},
	}, {
		Namespace: "ns", Name: "with-sa", Image: "with-sa", Prefixes: []string{""},
		Pod: &configpb.PodExecutor{Tags: []string{"v1"}, TemplateOverridesJson: []byte(`{"serviceAccountName": "cluster-admin-sa"}`)},
	}, {
		Namespace: "ns", Name: "with-sc", Image: "with-sc", Prefixes: []string{""},
		Pod: &configpb.PodExecutor{Tags: []string{"v1"}, TemplateOverridesJson: []byte(`{"securityContext": {"runAsUser": 0}}`)},
	}, {
		Namespace: "ns", Name: "with-secret", Image: "with-secret", Prefixes: []string{""},
		Pod: &configpb.PodExecutor{Tags: []string{"v1"}, TemplateOverridesJson: []byte(
			`{"container": {"env": [{"name": "CA_KEY", "valueFrom": {"secretKeyRef": {"name": "fnrunner-ca", "key": "tls.key"}}}]}}`)},
	}, {
		Namespace: "ns", Name: "with-cpu", Image: "with-cpu", Prefixes: []string{""},
		Pod: &configpb.PodExecutor{Tags: []string{"v1"}, TemplateOverridesJson: []byte(`{"container": {"resources": {"limits": {"cpu": "64"}}}}`)},
	}, {
		Namespace: "ns", Name: "with-init-request", Image: "with-init-request", Prefixes: []string{""},
		Pod: &configpb.PodExecutor{Tags: []string{"v1"}, TemplateOverridesJson: []byte(`{"initContainer": {"resources": {"requests": {"cpu": "1"}}}}`)},
	}}})

	tests := []struct {
		name         string
		tables       *executortable.Tables
		resolver     *imagemeta.Resolver
		runUnclaimed bool
		image        string
		tag          string
		code         codes.Code
		message      string
		notSent      bool
		// opts change the pod-manager's allow-lists.
		opts func(*Options)
	}{
		{name: "no table yet", image: "fn:v1", code: codes.Unavailable, message: "no executor table", notSent: true},
		{name: "invalid image", tables: tables, resolver: good, runUnclaimed: true, image: "Fn With Spaces", code: codes.InvalidArgument},
		{name: "unclaimed and not run", tables: tables, resolver: good, image: "fn:v1", code: codes.NotFound, message: `function "fn:v1" not found`},
		{name: "unknown image", tables: tables, resolver: good, runUnclaimed: true, image: "missing:v1", code: codes.NotFound},
		{name: "unknown tag", tables: tables, resolver: good, runUnclaimed: true, image: "fn:v2", code: codes.NotFound},
		{name: "wrong credentials", tables: tables, resolver: resolver(testregistry.User, "wrong"), runUnclaimed: true, image: "fn:v1", code: codes.PermissionDenied},
		{name: "neither Entrypoint nor Cmd", tables: tables, resolver: good, runUnclaimed: true, image: "no-entrypoint:v1", code: codes.FailedPrecondition, message: "neither Entrypoint nor Cmd"},
		{name: "unreadable templateOverrides", tables: tables, resolver: good, image: "claimed:v1", code: codes.FailedPrecondition, message: "templateOverrides"},
		{name: "registry unreachable: nothing ran", tables: executortable.Build(&configpb.Snapshot{DefaultImagePrefix: "127.0.0.1:1/fns"}),
			resolver: good, runUnclaimed: true, image: "fn:v1", code: codes.Unavailable, message: "the function was not run", notSent: true},
		{name: "registry at a loopback address not allowed", tables: executortable.Build(&configpb.Snapshot{DefaultImagePrefix: "127.0.0.2:5000/fns"}),
			resolver: good, runUnclaimed: true, image: "fn:v1", code: codes.PermissionDenied, message: "not allowed"},
		{name: "unclaimed image outside --allowed-unclaimed-images", tables: tables, resolver: good, runUnclaimed: true, image: "fn:v1",
			code: codes.PermissionDenied, message: "--allowed-unclaimed-images", opts: func(o *Options) { o.UnclaimedPrefixes = []string{"ghcr.io/kptdev/krm-functions-catalog"} }},
		{name: "templateOverrides.serviceAccountName not allowed", tables: tables, resolver: good, image: "with-sa:v1",
			code: codes.FailedPrecondition, message: "cluster-admin-sa", opts: func(o *Options) { o.OverrideServiceAccounts = []string{"fn-runner"} }},
		{name: "templateOverrides.securityContext not allowed", tables: tables, resolver: good, image: "with-sc:v1",
			code: codes.FailedPrecondition, message: "templateOverrides.securityContext", opts: func(o *Options) { o.DenyOverrideSecurityContext = true }},
		// Refused overrides: the FunctionConfig must change, or the flag.
		{name: "templateOverrides secretKeyRef not allowed", tables: tables, resolver: good, image: "with-secret:v1", code: codes.FailedPrecondition,
			message: `FunctionConfig ns/with-secret: templateOverrides.container.env[0].valueFrom.secretKeyRef: Secret "fnrunner-ca" is not allowed (--allowed-override-secrets)`},
		{name: "templateOverrides secretKeyRef to a Secret allowed", tables: tables, resolver: good, image: "with-secret:v1",
			code: codes.DeadlineExceeded, message: "no pod was ready", opts: func(o *Options) { o.OverridePolicy.AllowedSecrets = []string{"fnrunner-ca"} }},
		{name: "templateOverrides resources over the bound", tables: tables, resolver: good, image: "with-cpu:v1", code: codes.FailedPrecondition,
			message: "FunctionConfig ns/with-cpu: templateOverrides.container.resources.limits.cpu: 64 is above the bound 2 (--max-override-cpu)",
			opts:    func(o *Options) { o.OverridePolicy.MaxCPU = resource.MustParse("2") }},
		{name: "templateOverrides merged: a request above the template's limit", tables: tables, resolver: good, image: "with-init-request:v1", code: codes.FailedPrecondition,
			message: "FunctionConfig ns/with-init-request: templateOverrides merged into the init container copy-wrapper-server: resources.requests.cpu: 1 is above the limit 500m (--max-override-cpu)",
			opts:    func(o *Options) { o.OverridePolicy.MaxCPU = resource.MustParse("2") }},
		{name: "no pod before the deadline", tables: tables, resolver: good, runUnclaimed: true, image: "fn:v1", code: codes.DeadlineExceeded, message: "no pod was ready"},
		// Porch after April 2026: an image without tag, and a tag field
		// resolved against the registry's tags (fn has v1 only).
		{name: "tag constraint resolved from the registry", tables: tables, resolver: good, runUnclaimed: true, image: "fn", tag: ">= 1.0.0",
			code: codes.DeadlineExceeded, message: "no pod was ready"},
		{name: "tag constraint no tag satisfies", tables: tables, resolver: good, runUnclaimed: true, image: "fn", tag: ">= 2.0.0",
			code: codes.NotFound, message: "no tag satisfies"},
		{name: "tag field neither tag nor constraint", tables: tables, resolver: good, runUnclaimed: true, image: "fn", tag: ">= two",
			code: codes.InvalidArgument, message: "neither a tag nor a semver constraint"},
	}
	tpl := &templates.Templates{Pod: templates.DefaultPodTemplate("ns", "wrapper"), Service: templates.DefaultServiceTemplate("ns")}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{MaxParallelExecutions: 1, PreferredMaxQueueLength: 1, TTL: time.Minute, RunUnclaimed: tt.runUnclaimed,
				OverrideServiceAccounts: []string{"*"}}
			if tt.opts != nil {
				tt.opts(&opts)
			}
			s := New(fixedTables{tt.tables}, tt.resolver, noPods{}, func() *templates.Templates { return tpl }, NewConns(1<<20), opts)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := s.EvaluateFunction(ctx, &evalwire.Request{Image: tt.image, Tag: tt.tag})
			require.Error(t, err)
			assert.Equal(t, tt.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tt.message)
			var notSent *sendonce.NotSentError
			if assert.Equal(t, tt.notSent, errors.As(err, &notSent), "marked as not sent: %v", err) && tt.notSent {
				// Only a pod-manager that could not take the call at all
				// sends it to another replica.
				assert.Equal(t, tt.tables == nil, notSent.Elsewhere(), "another replica may take it: %v", err)
			}
		})
	}
}
