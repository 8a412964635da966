package writefence_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/writefence/writefence/internal/testserver"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// store or a fence that leaked one per call would exhaust a long-running
// writer.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testserver.LeakOptions()...)
}
