package writefence_test

import (
	"testing"

	"github.com/writefence/writefence/internal/testserver"
)

// Forwarders to internal/testserver for the test files that still call
// the old names.

func uniqueName(t testing.TB) string { return testserver.UniqueName(t) }
