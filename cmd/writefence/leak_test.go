package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. An idle
// keep-alive connection of an SDK client's HTTP transport is let through
// (its read loop blocks in persistConn.Read, its write loop in its select);
// a response body left open is still caught.
func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		// Started by wfProcess: be the command itself.
		os.Args = append([]string{"writefence"}, os.Args[1:]...)
		main()
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).Read"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
