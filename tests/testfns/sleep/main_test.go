package main

import (
	"testing"
	"time"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		data string
		want time.Duration
		err  string
	}{
		{"{}", 0, ""},
		{"{sleepSeconds: '5'}", 5 * time.Second, ""},
		{"{duration: 3s}", 3 * time.Second, ""},
		{"{duration: 1500ms, sleepSeconds: '1'}", 2500 * time.Millisecond, ""},
		{"{sleepSeconds: '-1'}", 0, `sleepSeconds "-1"`},
		{"{duration: x}", 0, `duration "x"`},
		{"{duration: -1s}", 0, `duration "-1s": negative`},
		{"{sleepSeconds: '601'}", 0, "a wait of 10m1s: more than 10m0s"},
	} {
		config, err := fn.ParseKubeObject([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: " + tc.data + "\n"))
		require.NoError(t, err)
		d, err := duration(config)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.data)
			continue
		}
		require.NoError(t, err, tc.data)
		assert.Equal(t, tc.want, d, tc.data)
	}
}

func TestRunAnswersTheItemsUnchanged(t *testing.T) {
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n  data: {k: v}\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data: {duration: 1ms}\n"
	out, err := fn.Run(fn.ResourceListProcessorFunc(run), []byte(in))
	require.NoError(t, err)
	assert.Contains(t, string(out), "  data: {k: v}\n")
	assert.Contains(t, string(out), "message: slept 1ms")
}
