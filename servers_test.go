package writefence_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// serverEnv returns the environment variable naming a real server for the
// integration tests. When it is unset the test is skipped, unless
// WRITEFENCE_REQUIRE_SERVERS is set (as .ci/run does), in which case a
// missing server fails the test rather than silently skipping it.
func serverEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("WRITEFENCE_REQUIRE_SERVERS") != "" {
			t.Fatalf("%s is not set but WRITEFENCE_REQUIRE_SERVERS is: the server this test needs was not started", name)
		}
		t.Skipf("%s not set: start the servers with .ci/run (or export it) to run this test", name)
	}
	return v
}

// uniqueName returns a fresh random name for a test's keys or bucket, so
// integration tests never see each other's data.
func uniqueName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "wf-" + hex.EncodeToString(b)
}
