package writefencetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// overwrite writes data at key whatever version it holds, using only the
// conditional write of m: it retries with the current version until one
// lands.
func overwrite(ctx context.Context, m *writefence.MemStore, key string, data []byte) (string, error) {
	for {
		_, current, err := m.Get(ctx, key)
		if err != nil && !errors.Is(err, writefence.ErrNotFound) {
			return "", err
		}
		v, err := m.PutIfVersion(ctx, key, data, current)
		if !errors.Is(err, writefence.ErrConflict) {
			return v, err
		}
	}
}

// clientCompareStore is the implementation the contract forbids: it reads,
// compares the version on the client, then writes unconditionally. It is
// correct whenever only one caller writes at a time.
type clientCompareStore struct {
	writefence.MemStore
	gap time.Duration // between the compare and the write, to widen the window
}

func (s *clientCompareStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	_, current, err := s.MemStore.Get(ctx, key)
	if err != nil && !errors.Is(err, writefence.ErrNotFound) {
		return "", err
	}
	if current != expect {
		return "", writefence.ErrConflict
	}
	time.Sleep(s.gap)
	return overwrite(ctx, &s.MemStore, key, data)
}

// ignoringStore ignores preconditions entirely, as some S3-compatible
// services do with If-Match and If-None-Match.
type ignoringStore struct{ writefence.MemStore }

func (s *ignoringStore) PutIfVersion(ctx context.Context, key string, data []byte, _ string) (string, error) {
	return overwrite(ctx, &s.MemStore, key, data)
}

// brokenEnv selects the store TestHelperBroken runs the suite against.
const brokenEnv = "WRITEFENCETEST_BROKEN_STORE"

var childStores = map[string]func() writefence.ConditionalStore{
	"memstore":       func() writefence.ConditionalStore { return new(writefence.MemStore) },
	"client-compare": func() writefence.ConditionalStore { return &clientCompareStore{gap: time.Millisecond} },
	"ignoring":       func() writefence.ConditionalStore { return new(ignoringStore) },
}

// TestHelperBroken is not a test on its own: TestSuiteHasTeeth runs it in a
// child process, because a failing *testing.T cannot be observed from
// inside the test binary.
func TestHelperBroken(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestSuiteHasTeeth in a child process")
	}
	newStore, ok := childStores[name]
	require.True(t, ok, "unknown %s=%q", brokenEnv, name)
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return newStore() })
}

var (
	failedSubtest = regexp.MustCompile(`--- FAIL: TestHelperBroken/(\S+/\S+) `)
	raceSummary   = regexp.MustCompile(`\d+ rounds x .*`)
)

// TestSuiteHasTeeth runs the suite against each store in a child process and
// checks which clauses fail: none on MemStore, the races on a store that
// compares on the client, and every precondition on one that ignores them.
func TestSuiteHasTeeth(t *testing.T) {
	races := []string{"Race/Update", "Race/Create", "Race/FencePush"}
	tests := []struct {
		store    string
		wantFail []string
	}{
		{"memstore", nil},
		{"client-compare", races},
		{"ignoring", append([]string{"Create/Existing", "Update/Stale", "Update/Missing", "Update/Deleted"}, races...)},
	}
	for _, tt := range tests {
		t.Run(tt.store, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0],
				"-test.run=^TestHelperBroken$", "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tt.store)
			out, err := cmd.CombinedOutput()

			var failed []string
			for _, m := range failedSubtest.FindAllSubmatch(out, -1) {
				failed = append(failed, string(m[1]))
			}
			for _, m := range raceSummary.FindAll(out, -1) {
				t.Logf("%s: %s", tt.store, m)
			}
			if len(tt.wantFail) == 0 {
				require.NoError(t, err, "the suite failed on %s:\n%s", tt.store, out)
				require.Contains(t, string(out), "--- PASS: TestHelperBroken/Race/FencePush", "the child ran nothing:\n%s", out)
				return
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite passed on %s:\n%s", tt.store, out)
			require.NotZero(t, exit.ExitCode())
			slices.Sort(failed)
			want := slices.Sorted(slices.Values(tt.wantFail))
			assert.Equal(t, want, failed, "failing subtests on %s; child output:\n%s", tt.store, tailLines(out, 60))
			t.Logf("%s: failed %s", tt.store, strings.Join(failed, ", "))
		})
	}
}

// tailLines returns the last n lines of out, enough to explain a mismatch
// without flooding the log.
func tailLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
