package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

// A call's thread takes only the calls it was restricted for: one with the
// filter not a call in namespaces (whose helper inside must set the limits
// from a thread without it), and none once restricting it failed.
func TestRestrictedTakes(t *testing.T) {
	failed := errors.New("no_new_privs: operation not permitted")
	for _, tc := range []struct {
		name       string
		r          restricted
		namespaces bool
		err        error
	}{
		{"filter, no namespaces", restricted{seccomp: true}, false, nil},
		{"filter, namespaces", restricted{seccomp: true}, true, errAny},
		{"no filter, namespaces", restricted{}, true, nil},
		{"no filter, no namespaces (installed at the start)", restricted{}, false, nil},
		{"failed", restricted{err: failed}, false, failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.takes(spec.Spec{Namespaces: tc.namespaces})
			switch tc.err {
			case nil:
				assert.NoError(t, err)
			case errAny:
				assert.Error(t, err)
			default:
				assert.ErrorIs(t, err, tc.err)
			}
		})
	}
}

// errAny is a test case's "some error".
var errAny = errors.New("any error")
