package exitlog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/internal/exitlog"
)

func TestOf(t *testing.T) {
	cause := errors.New("substring must not be empty")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"the SDK's", cause, "failed to evaluate function: substring must not be empty"},
		{"printed twice", exitlog.PrintedTwice(cause), "substring must not be emptysubstring must not be empty\n"},
		{"an error result", exitlog.ErrorResult(cause), "[error] : substring must not be empty"},
		{"wrapped", fmt.Errorf("run: %w", exitlog.PrintedTwice(cause)), "substring must not be emptysubstring must not be empty\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, exitlog.Of(tt.err))
			require.ErrorIs(t, tt.err, cause)
		})
	}
}
