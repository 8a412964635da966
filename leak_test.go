package writefence_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/writefence/writefence/internal/testserver"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// store or a fence that leaked one per call would exhaust a long-running
// writer. It also sets rapid's flags for the model tests on the servers,
// once, before any of them runs in parallel.
func TestMain(m *testing.M) {
	flag.Parse()
	if _, err := setModelFlags(modelChecksLocal); err != nil {
		fmt.Fprintln(os.Stderr, "rapid's flags:", err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, testserver.LeakOptions()...)
}
