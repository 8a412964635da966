package writefence_test

import (
	"testing"

	"github.com/writefence/writefence/internal/modeltest"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// store or a fence that leaked one per call would exhaust a long-running
// writer. It also sets rapid's flags for the model tests on the servers,
// once, before any of them runs in parallel (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }
