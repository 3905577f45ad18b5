package setlabels_test

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/fnrunner/fnrunner/services/binary-runner/functions/set-labels/setlabels"
)

// TestCorpus runs set-labels on the corpus's set-labels cases.
func TestCorpus(t *testing.T) {
	for _, c := range corpusCases(t, "set-labels") {
		t.Run(c.name, func(t *testing.T) {
			results := runCorpusCase(t, c, fn.ResourceListProcessorFunc(setlabels.Run))
			t.Logf("results:\n%s", results.String())
		})
	}
}
