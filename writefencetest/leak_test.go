package writefencetest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/writefence/writefence/internal/testserver"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testserver.LeakOptions()...)
}
