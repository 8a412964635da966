package writefencetest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// partsStore is MemStore with PutPartsIfVersion: correct, or, with ignore
// set, writing the parts whatever the precondition while its PutIfVersion
// stays correct.
type partsStore struct {
	writefence.MemStore
	ignore bool
}

func (s *partsStore) Capabilities() writefence.ConditionalStore { return s }

func (s *partsStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	data := bytes.Join(parts, nil)
	if s.ignore {
		return overwrite(ctx, &s.MemStore, key, data)
	}
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

// brokenEnv selects the store TestHelperBroken runs the suite against.
const brokenEnv = "WRITEFENCETEST_BROKEN_STORE"

var childStores = map[string]func() writefence.ConditionalStore{
	"memstore":       func() writefence.ConditionalStore { return new(writefence.MemStore) },
	"client-compare": func() writefence.ConditionalStore { return &clientCompareStore{gap: time.Millisecond} },
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
	for name, fault := range map[string]brandFault{"branded-memstore": brandChecked, "ignoring-brand": brandIgnored, "once-brand": brandOnce} {
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
	failedSubtest = regexp.MustCompile(`--- FAIL: TestHelperBroken/(\S+/\S+) `)
	raceSummary   = regexp.MustCompile(`\d+ rounds x .*`)
)

// TestSuiteHasTeeth runs the suite against each store in a child process and
// checks which clauses fail: none on a correct store, and on each broken
// store exactly the clauses it breaks, in every run.
func TestSuiteHasTeeth(t *testing.T) {
	races := []string{"Race/Update", "Race/Create", "Race/FencePush"}
	prefix := []string{"GetPrefix/MatchesGet", "Get/UnderOverwrite"}
	tests := []struct {
		store    string
		wantFail []string
		wantPass []string // checks of optional capabilities that must run and pass
	}{
		{"memstore", nil, nil},
		{"prefix-memstore", nil, []string{"GetPrefix/MatchesGet", "GetPrefix/Missing"}},
		{"client-compare", races, nil},
		{"ignoring", append([]string{"Create/Existing", "Update/Stale", "Update/Missing", "Update/Deleted"}, races...), nil},
		{"reused-tokens", []string{"Tokens/AfterDelete"}, nil},
		{"stale-prefix", prefix, nil},
		{"prefix-size", prefix, nil},
		{"prefix-whole", prefix, nil},
		{"torn-reads", []string{"Get/UnderOverwrite"}, nil},
		{"parts-memstore", nil, []string{"PutParts/MatchesPut", "PutParts/Aliasing"}},
		{"ignoring-parts", []string{"PutParts/MatchesPut", "Race/FencePush"}, nil},
		{"branded-memstore", nil, []string{"Branded/Absent", "Branded/Other", "Branded/Matching", "Branded/Changed"}},
		{"ignoring-brand", []string{"Branded/Absent", "Branded/Other", "Branded/Changed"}, nil},
		{"once-brand", []string{"Branded/Changed"}, nil},
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
				for _, c := range append([]string{"Race/FencePush", "Get/UnderOverwrite", "Tokens/AfterDelete"}, tt.wantPass...) {
					require.Contains(t, string(out), "--- PASS: TestHelperBroken/"+c+" ", "%s did not run:\n%s", c, out)
				}
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

// counterStore numbers each key's versions from 1, and forgets the count
// when the key is deleted: its conditional write is atomic, but a token
// comes back for other bytes once a key is deleted and created again.
type counterStore struct {
	mu      sync.Mutex // guards objects
	objects objects
}

// objects holds a store's objects by key, each with its version number.
type objects map[string]counted

type counted struct {
	data    []byte
	version int
}

// get returns a copy of key's bytes and its version.
func (m objects) get(key string) ([]byte, string, error) {
	o, ok := m[key]
	if !ok {
		return nil, "", writefence.ErrNotFound
	}
	return slices.Clone(o.data), strconv.Itoa(o.version), nil
}

// current returns key's object, and whether expect is its version ("" for
// a key that does not exist).
func (m objects) current(key, expect string) (counted, bool) {
	o, ok := m[key]
	return o, ok == (expect != "") && (!ok || strconv.Itoa(o.version) == expect)
}

func (s *counterStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects.get(key)
}

func (s *counterStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects.current(key, expect)
	if !ok {
		return "", writefence.ErrConflict
	}
	if s.objects == nil {
		s.objects = objects{}
	}
	o = counted{data: slices.Clone(data), version: o.version + 1}
	s.objects[key] = o
	return strconv.Itoa(o.version), nil
}

func (s *counterStore) Delete(ctx context.Context, key string) error {
	if ctx.Err() == nil {
		s.mu.Lock()
		delete(s.objects, key)
		s.mu.Unlock()
	}
	return ctx.Err()
}

// prefixFault is how a prefixStore's GetPrefix departs from its Get.
type prefixFault int

const (
	prefixCorrect      prefixFault = iota
	prefixStaleVersion             // the version of the write before the latest, as a lagging metadata cache would
	prefixSizeOfPrefix             // the prefix's length as the object's size
	prefixWholeObject              // every byte, whatever n asks for
)

// prefixStore is a MemStore with a GetPrefix, correct or with one fault.
type prefixStore struct {
	writefence.MemStore
	fault prefixFault

	mu       sync.Mutex        // guards previous
	previous map[string]string // each key's version before its latest write
}

func (s *prefixStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock() // held across the write, so previous stays in step with it
	defer s.mu.Unlock()
	v, err := s.MemStore.PutIfVersion(ctx, key, data, expect)
	if err == nil {
		if s.previous == nil {
			s.previous = map[string]string{}
		}
		s.previous[key] = expect
	}
	return v, err
}

func (s *prefixStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.previous, key)
	return s.MemStore.Delete(ctx, key)
}

func (s *prefixStore) Capabilities() writefence.ConditionalStore { return s }

func (s *prefixStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, v, err := s.MemStore.Get(ctx, key)
	if err != nil {
		return nil, 0, "", err
	}
	size := int64(len(data))
	if s.fault != prefixWholeObject {
		data = data[:min(n, size)]
	}
	switch s.fault {
	case prefixStaleVersion:
		if prev := s.previous[key]; prev != "" {
			v = prev
		}
	case prefixSizeOfPrefix:
		size = int64(len(data))
	}
	return data, size, v, nil
}

// tornWindow bounds how long a tornStore's update waits for a read to see
// its new bytes under the previous version. Readers of the overwrite check
// read without pause, so one arrives long before; a lone writer just waits
// it out.
const tornWindow = 20 * time.Millisecond

// tornStore publishes an update in two steps, the bytes first and the
// version after, as some S3-compatible servers do under concurrent
// overwrite: a Get between the steps pairs the new bytes with the previous
// version. Its conditional write is atomic (writes are serialised and
// compare against the published version), and a read when no write is in
// flight is consistent.
type tornStore struct {
	write sync.Mutex // serialises writes and deletes

	mu      sync.Mutex // guards the fields below
	objects objects
	counter int
	torn    chan struct{} // open while an update's window is; closed by the read that sees it
}

func (s *tornStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, v, err := s.objects.get(key)
	if err == nil && s.torn != nil {
		close(s.torn)
		s.torn = nil
	}
	return data, v, err
}

func (s *tornStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.write.Lock()
	defer s.write.Unlock()
	s.mu.Lock()
	o, ok := s.objects.current(key, expect)
	if !ok {
		s.mu.Unlock()
		return "", writefence.ErrConflict
	}
	if s.objects == nil {
		s.objects = objects{}
	}
	s.counter++
	next := s.counter
	if expect == "" {
		s.objects[key] = counted{data: slices.Clone(data), version: next}
		s.mu.Unlock()
		return strconv.Itoa(next), nil
	}
	s.objects[key] = counted{data: slices.Clone(data), version: o.version}
	torn := make(chan struct{})
	s.torn = torn
	s.mu.Unlock()

	t := time.NewTimer(tornWindow)
	select {
	case <-torn:
	case <-t.C:
	}
	t.Stop()

	s.mu.Lock()
	if s.torn == torn {
		s.torn = nil
	}
	s.objects[key] = counted{data: s.objects[key].data, version: next}
	s.mu.Unlock()
	return strconv.Itoa(next), nil
}

func (s *tornStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.write.Lock()
	defer s.write.Unlock()
	s.mu.Lock()
	delete(s.objects, key)
	s.mu.Unlock()
	return nil
}

// brandFault is how a brandedStore's PutIfBranded departs from the
// contract.
type brandFault int

const (
	brandChecked brandFault = iota // correct: the brand read in every write's step
	brandIgnored                   // PutIfVersion, whatever the brand holds
	brandOnce                      // the brand read until it matched once, then remembered
)

// brandedStore is a MemStore with PutIfBranded, correct or with one fault.
// Its writes are serialised, so a brand check and the write after it are
// one step.
type brandedStore struct {
	writefence.MemStore
	fault brandFault

	mu      sync.Mutex      // serialises writes and deletes; guards matched
	matched map[string]bool // brand keys found holding the identity once
}

func (s *brandedStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

func (s *brandedStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemStore.Delete(ctx, key)
}

func (s *brandedStore) Capabilities() writefence.ConditionalStore { return s }

func (s *brandedStore) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	data := bytes.Join(parts, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault == brandChecked || s.fault == brandOnce && !s.matched[brandKey] {
		found, _, err := s.MemStore.Get(ctx, brandKey)
		switch {
		case errors.Is(err, writefence.ErrNotFound):
			return "", &writefence.WireError{Key: brandKey, Expected: identity, Absent: true}
		case err != nil:
			return "", err
		case string(found) != identity:
			return "", &writefence.WireError{Key: brandKey, Expected: identity, Found: string(found)}
		}
		if s.matched == nil {
			s.matched = map[string]bool{}
		}
		s.matched[brandKey] = true
	}
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}
