package writefencetest_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// brokenEnv selects the store TestHelperBroken runs the suite against.
const brokenEnv = "WRITEFENCETEST_BROKEN_STORE"

var childStores = map[string]func() writefence.ConditionalStore{
	"memstore":       func() writefence.ConditionalStore { return new(writefence.MemStore) },
	"client-compare": func() writefence.ConditionalStore { return new(clientCompareStore) },
	"ignoring":       func() writefence.ConditionalStore { return new(ignoringStore) },
	"reused-tokens":  func() writefence.ConditionalStore { return new(counterStore) },
	"torn-reads":     func() writefence.ConditionalStore { return new(tornStore) },
	"parts-memstore": func() writefence.ConditionalStore { return new(partsStore) },
	"ignoring-parts": func() writefence.ConditionalStore { return &partsStore{ignore: true} },
}

// The doubles that differ only in their fault.
func init() {
	for name, fault := range map[string]prefixFault{"prefix-memstore": prefixCorrect, "stale-prefix": prefixStaleVersion,
		"prefix-size": prefixSizeOfPrefix, "prefix-whole": prefixWholeObject} {
		childStores[name] = func() writefence.ConditionalStore { return &prefixStore{fault: fault} }
	}
	for name, fault := range map[string]brandFault{"branded-memstore": brandChecked, "ignoring-brand": brandIgnored, "once-brand": brandOnce,
		"brand-compare": brandClientCompare} {
		childStores[name] = func() writefence.ConditionalStore { return &brandedStore{fault: fault} }
	}
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
	failedSubtest  = regexp.MustCompile(`--- FAIL: TestHelperBroken/(\S+/\S+) `)
	skippedSubtest = regexp.MustCompile(`--- SKIP: TestHelperBroken/(\S+/\S+) `)
	raceSummary    = regexp.MustCompile(`\d+ rounds x .*|\d+ writes, \d+ reads .*`)
)

// Which method the helpers call, as the suite logs it.
const (
	ownPrefix     = "writefence.GetPrefix on this store calls its GetPrefix"
	ownParts      = "writefence.PutParts on this store calls its PutPartsIfVersion"
	ownBranded    = "writefence.PutIfBranded on this store calls its PutIfBranded"
	fallbackPaths = "writefence.PutIfBranded on this store falls back to Get of the brand key"
)

// TestSuiteHasTeeth runs the suite against each store in a child process and
// checks which clauses fail: none on a correct store, and on each broken
// store exactly the clauses it breaks, in every run; that none is skipped,
// so every check ran; and that the suite says which method it checked.
func TestSuiteHasTeeth(t *testing.T) {
	races := []string{"Race/Branded", "Race/BrandFlip", "Race/Create", "Race/FencePush", "Race/Update"}
	prefix := []string{"GetPrefix/MatchesGet", "Get/UnderOverwrite"}
	wrongWrites := []string{"Branded/Matching", "Create/Existing", "PutParts/MatchesPut", "Update/Deleted", "Update/Missing", "Update/Stale"}
	tests := []struct {
		store    string
		wantFail []string
		wantLog  []string // lines the suite must log
	}{
		{"memstore", nil, []string{"writefence.GetPrefix on this store falls back to Get", fallbackPaths}},
		{"prefix-memstore", nil, []string{ownPrefix}},
		{"parts-memstore", nil, []string{ownParts}},
		{"branded-memstore", nil, []string{ownBranded}},
		{"client-compare", races, nil},
		{"ignoring", concat(wrongWrites, races), nil},
		{"reused-tokens", []string{"Tokens/AfterDelete"}, nil},
		{"stale-prefix", prefix, []string{ownPrefix}},
		{"prefix-size", prefix, []string{ownPrefix}},
		{"prefix-whole", prefix, []string{ownPrefix}},
		{"torn-reads", []string{"Get/UnderOverwrite"}, nil},
		{"ignoring-parts", concat(wrongWrites, races), []string{ownParts}},
		{"ignoring-brand", []string{"Branded/Absent", "Branded/Changed", "Branded/Other", "Race/BrandFlip"}, []string{ownBranded}},
		{"once-brand", []string{"Branded/Changed", "Race/BrandFlip"}, []string{ownBranded}},
		{"brand-compare", []string{"Race/BrandFlip", "Race/Branded"}, []string{ownBranded}},
	}
	for _, tt := range tests {
		t.Run(tt.store, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0],
				"-test.run=^TestHelperBroken$", "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tt.store)
			out, err := cmd.CombinedOutput()

			for _, m := range raceSummary.FindAll(out, -1) {
				t.Logf("%s: %s", tt.store, m)
			}
			assert.Empty(t, subtests(skippedSubtest, out), "skipped subtests on %s", tt.store)
			for _, line := range tt.wantLog {
				assert.Contains(t, string(out), line, "the suite did not log which method it checks")
			}
			if len(tt.wantFail) == 0 {
				require.NoError(t, err, "the suite failed on %s:\n%s", tt.store, out)
				return
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite passed on %s:\n%s", tt.store, out)
			require.NotZero(t, exit.ExitCode())
			failed := subtests(failedSubtest, out)
			assert.Equal(t, sorted(tt.wantFail), failed, "failing subtests on %s; child output:\n%s", tt.store, tailLines(out, 60))
			t.Logf("%s: failed %s", tt.store, strings.Join(failed, ", "))
		})
	}
}

// subtests returns the sorted names re matches in out.
func subtests(re *regexp.Regexp, out []byte) []string {
	names := []string{}
	for _, m := range re.FindAllSubmatch(out, -1) {
		names = append(names, string(m[1]))
	}
	slices.Sort(names)
	return names
}

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// sorted returns a sorted copy of names, never nil.
func sorted(names []string) []string {
	c := append([]string{}, names...)
	slices.Sort(c)
	return c
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
