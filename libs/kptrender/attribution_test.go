package kptrender

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRecordFn: the values kpt's recordAction gives for the fn group.
func TestRecordFn(t *testing.T) {
	for cur, want := range map[string]string{
		"":                         "krm-fn",
		"krm-fn":                   "krm-fn",
		"krm-pkg":                  "krm-pkg-fn",
		"krm-live":                 "krm-fn-live",
		"krm-pkg-live":             "krm-pkg-fn-live",
		"cnrm/landing-zone:v0.4.0": "cnrm/landing-zone:v0.4.0,krm-fn",
		"cnrm/landing-zone:networking/v0.4.0,krm-pkg,blueprints_controller": "cnrm/landing-zone:networking/v0.4.0,krm-pkg-fn,blueprints_controller",
		"krm-pkg,krm-live": "krm-pkg-fn,krm-pkg-fn-fn-live",
	} {
		assert.Equal(t, want, recordFn(cur), "recordFn(%q)", cur)
	}
}
