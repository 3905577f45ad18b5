package setannotations_test

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-annotations/setannotations"
)

// TestCorpus runs set-annotations on the corpus's set-annotations cases.
func TestCorpus(t *testing.T) {
	for _, c := range corpusCases(t, "set-annotations") {
		t.Run(c.name, func(t *testing.T) {
			results := runCorpusCase(t, c, fn.ResourceListProcessorFunc(setannotations.Run))
			t.Logf("results:\n%s", results.String())
		})
	}
}
