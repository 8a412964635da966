package writefence_test

import (
	"testing"

	"github.com/writefence/writefence/internal/testserver"
)

// Forwarders to internal/testserver for the test files that still call
// the old names.

func serverEnv(t testing.TB, name string) string { return testserver.Env(t, name) }

func uniqueName(t testing.TB) string { return testserver.UniqueName(t) }

func startValkeyServer(t *testing.T, password string, args ...string) string {
	return testserver.StartValkey(t, password, args...)
}
