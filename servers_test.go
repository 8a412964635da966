package writefence_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
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
	if _, err := crand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "wf-" + hex.EncodeToString(b)
}

// startValkeyServer starts a valkey-server of the test's own on a free port
// in 20000-32000 with the given extra arguments, waits until it answers
// (authenticating with password when set), stops it when the test ends,
// and returns its address. Without valkey-server on PATH the test is
// skipped, or fails when WRITEFENCE_REQUIRE_SERVERS is set.
func startValkeyServer(t *testing.T, password string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		if os.Getenv("WRITEFENCE_REQUIRE_SERVERS") != "" {
			t.Fatalf("valkey-server is not on PATH but WRITEFENCE_REQUIRE_SERVERS is set")
		}
		t.Skip("valkey-server is not on PATH")
	}
	for range 5 {
		port := strconv.Itoa(20000 + rand.IntN(12000))
		addr := net.JoinHostPort("127.0.0.1", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		_ = ln.Close()
		argv := append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", t.TempDir(),
			"--save", "", "--appendonly", "no", "--daemonize", "no"}, args...)
		cmd := exec.Command(bin, argv...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
		ready := false
		for deadline := time.Now().Add(10 * time.Second); !ready && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			select {
			case <-exited:
				deadline = time.Time{}
			default:
				ready = c.Ping(context.Background()).Err() == nil
			}
		}
		_ = c.Close()
		if ready {
			t.Cleanup(stop)
			return addr
		}
		stop()
		t.Logf("valkey-server %v on port %s did not start (retrying on another port): %s", args, port, out.String())
	}
	t.Fatalf("could not start valkey-server %v", args)
	return ""
}
