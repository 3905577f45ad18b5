package porch_test

import (
	"testing"

	"github.com/fnrunner/fnrunner/tests/porch"
)

func TestMain(m *testing.M) { porch.InNetworkNamespace(m) }
