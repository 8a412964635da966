package writefence_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// store or a fence that leaked one per call would exhaust a long-running
// writer.
//
// Two goroutines of net/http are let through: those of an idle keep-alive
// connection, which an SDK client's transport keeps after its test ends
// unless the test closes it (several test helpers build clients on the
// SDKs' default transports). An idle connection's read loop blocks reading
// the socket, in persistConn.Read; its write loop waits in its select. A
// response body left open is still caught: its connection's read loop
// waits for the body's end in its own select, not in a read.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).Read"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
