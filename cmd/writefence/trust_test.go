package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/probecheck"
)

// garblingStore enforces preconditions but reads back other bytes than
// were written: a server, proxy or cache that damages what it returns.
type garblingStore struct{ writefence.MemStore }

func (s *garblingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	d, v, err := s.MemStore.Get(ctx, key)
	if len(d) > 0 {
		d[0] ^= 1
	}
	return d, v, err
}

// ignoringStore reads correctly but writes every PutIfVersion, whatever
// the expected version: a server that accepts precondition headers and
// ignores them.
type ignoringStore struct {
	mu  sync.Mutex // makes the read and the write of a PutIfVersion one
	mem writefence.MemStore
}

func (s *ignoringStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.mem.Get(ctx, key)
}

func (s *ignoringStore) PutIfVersion(ctx context.Context, key string, data []byte, _ string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, cur, err := s.mem.Get(ctx, key)
	if err != nil && !errors.Is(err, writefence.ErrNotFound) {
		return "", err
	}
	return s.mem.PutIfVersion(ctx, key, data, cur)
}

// blindStore accepts every write and never finds anything: every writer
// of a race sees an empty shard and lands, whatever the scheduling.
type blindStore struct{}

func (blindStore) Get(context.Context, string) ([]byte, string, error) {
	return nil, "", writefence.ErrNotFound
}

func (blindStore) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	return "1", nil
}

func TestProbe(t *testing.T) {
	for _, addr := range []string{"mem://", fileStore(t)} {
		r := wf(t, "probe", "-store", addr)
		require.Equal(t, exitOK, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stdout, "trusted: "+addr+" enforces conditional writes")
		for _, c := range probeChecks {
			assert.Contains(t, r.stdout, "ok      "+c+"\n")
		}
		r = wf(t, "probe", "-json", "-store", addr)
		require.Equal(t, exitOK, r.code, "%s", r)
		m := jsonOf(t, r)
		assert.Equal(t, true, m["trusted"])
		assert.Len(t, m["passed"], len(probeChecks))
	}
}

// TestProbeUntrusted: a store that ignores preconditions fails the probe
// with the untrusted status and the check it failed.
func TestProbeUntrusted(t *testing.T) {
	r := wf(t, "probe", "-store", "ignoring://")
	assert.Equal(t, exitUntrusted, r.code, "%s", r)
	assert.Contains(t, r.stdout, "FAILED  "+probecheck.CreateRefused)
	assert.Contains(t, r.stdout, "untrusted: ignoring:// does not enforce conditional writes")

	r = wf(t, "probe", "-json", "-store", "ignoring://")
	assert.Equal(t, exitUntrusted, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "untrusted", m["outcome"])
	assert.Equal(t, false, m["trusted"])
	assert.Equal(t, probecheck.CreateRefused, m["failed"])
}

// TestProbeHeadlineNamesTheCheck: the one-line verdict says what the store
// did wrong, not always "does not enforce conditional writes".
func TestProbeHeadlineNamesTheCheck(t *testing.T) {
	for _, tc := range []struct{ store, check, headline string }{
		{"ignoring://", probecheck.CreateRefused, "untrusted: ignoring:// does not enforce conditional writes"},
		{"garbling://", probecheck.ReadBack, "untrusted: garbling:// reads back other bytes than it wrote"},
		{"blind://", probecheck.ReadBack, "untrusted: blind:// reads back nothing after a write it acknowledged"},
	} {
		r := wf(t, "probe", "-store", tc.store)
		assert.Equal(t, exitUntrusted, r.code, "%s", r)
		assert.Contains(t, r.stdout, "FAILED  "+tc.check, "%s", r)
		assert.Contains(t, r.stdout, tc.headline, "%s", r)
		if tc.check != probecheck.CreateRefused {
			assert.NotContains(t, r.stdout, "does not enforce conditional writes", "%s", r)
		}
	}
}

func TestProbeKey(t *testing.T) {
	assert.Equal(t, "writefence/_probe", probeKey(""))
	assert.Equal(t, "x/_probe", probeKey("x/"))
}

func TestRace(t *testing.T) {
	for _, addr := range []string{"mem://", fileStore(t)} {
		r := wf(t, "race", "-store", addr, "-writers", "8", "-rounds", "5")
		require.Equal(t, exitOK, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stdout, "result: 5 rounds of 8 writers, exactly one winner each")
		assert.Contains(t, r.stderr, "race: round 5/5, 0 violations, 0 errors\n", "the final progress line")
		assert.Equal(t, 5, strings.Count(r.stdout, " 7      0      writer-"), "one winner and 7 stale per round:\n%s", r.stdout)

		r = wf(t, "race", "-json", "-store", addr, "-writers", "4", "-rounds", "3")
		require.Equal(t, exitOK, r.code, "%s", r)
		m := jsonOf(t, r)
		assert.Equal(t, "ok", m["outcome"])
		assert.Empty(t, m["violations"])
		rounds := m["results"].([]any)
		require.Len(t, rounds, 3)
		for i, x := range rounds {
			round := x.(map[string]any)
			assert.EqualValues(t, i+1, round["epoch"])
			assert.Len(t, round["winners"], 1)
			assert.EqualValues(t, 3, round["stale"])
		}
	}
}

// TestRaceCleansUp: the scratch record is deleted afterwards, unless -keep,
// and a shard that exists is refused (its epochs would not start at 1).
func TestRaceCleansUp(t *testing.T) {
	addr := fileStore(t)
	require.Equal(t, exitOK, wf(t, "race", "-store", addr, "-rounds", "2", "-shard", "s").code)
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "writefence-race", "s").code)

	require.Equal(t, exitOK, wf(t, "race", "-store", addr, "-rounds", "2", "-shard", "s", "-keep").code)
	r := wf(t, "latest", "-store", addr, "-json", "writefence-race", "s")
	require.Equal(t, exitOK, r.code)
	assert.EqualValues(t, 2, jsonOf(t, r)["epoch"])

	r = wf(t, "race", "-store", addr, "-rounds", "2", "-shard", "s")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "exists")
	assert.Equal(t, exitOK, wf(t, "latest", "-store", addr, "writefence-race", "s").code, "a refused race deletes nothing")
}

// TestRaceViolation: on a store that lets every writer land, race reports
// the violation and exits with its status.
func TestRaceViolation(t *testing.T) {
	r := wf(t, "race", "-store", "blind://", "-writers", "4", "-rounds", "2")
	assert.Equal(t, exitViolation, r.code, "%s", r)
	assert.Contains(t, r.stdout, "VIOLATION: round 1: 4 writers landed epoch 1")
	assert.Contains(t, r.stdout, "this store does not fence writers")

	r = wf(t, "race", "-json", "-store", "blind://", "-writers", "4", "-rounds", "2")
	assert.Equal(t, exitViolation, r.code)
	m := jsonOf(t, r)
	assert.Equal(t, "violation", m["outcome"])
	assert.NotEmpty(t, m["violations"])
}

func TestRaceUsage(t *testing.T) {
	assert.Equal(t, exitUsage, wf(t, "race", "-store", "mem://", "-writers", "1").code)
	assert.Equal(t, exitUsage, wf(t, "race", "-store", "mem://", "-rounds", "0").code)
}

// TestRaceCatchesIgnoringStore: every writer has read the record before any
// writes, so on a store that ignores preconditions every writer lands in
// every round, run after run, with the default writers and rounds.
func TestRaceCatchesIgnoringStore(t *testing.T) {
	for run := range 5 {
		r := wf(t, "race", "-json", "-store", "ignoring://")
		require.Equal(t, exitViolation, r.code, "run %d: %s", run, r)
		m := jsonOf(t, r)
		assert.Equal(t, "violation", m["outcome"])
		assert.Len(t, m["violations"], 20, "run %d: one violation per round", run)
		for _, x := range m["results"].([]any) {
			round := x.(map[string]any)
			assert.Len(t, round["winners"], 16, "run %d round %v: every writer lands", run, round["round"])
		}
	}
}

// TestRaceWinnerChanges: the writers are let go in a random order, so on a
// local store the winner is not the same writer every round.
func TestRaceWinnerChanges(t *testing.T) {
	for _, addr := range []string{"mem://", fileStore(t)} {
		r := wf(t, "race", "-json", "-store", addr, "-shard", "winner", "-rounds", "20")
		require.Equal(t, exitOK, r.code, "%s: %s", addr, r)
		winners := map[string]int{}
		for _, x := range jsonOf(t, r)["results"].([]any) {
			ws := x.(map[string]any)["winners"].([]any)
			require.Len(t, ws, 1)
			winners[ws[0].(string)]++
		}
		assert.Greater(t, len(winners), 1, "%s: one writer won all 20 rounds: %v", addr, winners)
	}
}

// interruptingStore is a MemStore that cancels the command's context the
// moment its land-th write lands, and returns the cancellation for it: an
// interrupt that arrives while a write's reply is on its way, so its
// writer learns nothing of the outcome.
type interruptingStore struct {
	mem    *writefence.MemStore
	land   int
	cancel context.CancelFunc
	mu     sync.Mutex // guards landed
	landed int
}

func (s *interruptingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.mem.Get(ctx, key)
}

func (s *interruptingStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.mem.PutIfVersion(ctx, key, data, expect)
	if err != nil {
		return v, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.landed++; s.landed == s.land {
		s.cancel()
		return "", ctx.Err()
	}
	return v, nil
}

func (s *interruptingStore) Delete(ctx context.Context, key string) error {
	return s.mem.Delete(ctx, key)
}

var interrupting struct {
	mu     sync.Mutex // guards stores
	stores map[string]*interruptingStore
}

// interruptingStoreNamed returns the interruptingStore a test registered
// as name.
func interruptingStoreNamed(name string) *interruptingStore {
	interrupting.mu.Lock()
	defer interrupting.mu.Unlock()
	return interrupting.stores[name]
}

// TestRaceInterrupted: an interrupt in the middle of a round ends the race
// with the interrupt's status (never 8 from the write it cut short, never
// a violation), reports the rounds that ran to their end, and deletes the
// scratch record all the same.
func TestRaceInterrupted(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := &interruptingStore{mem: &writefence.MemStore{}, land: 3, cancel: cancel}
		name := t.Name() + strconv.FormatBool(asJSON)
		name = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(name))
		interrupting.mu.Lock()
		if interrupting.stores == nil {
			interrupting.stores = map[string]*interruptingStore{}
		}
		interrupting.stores[name] = s
		interrupting.mu.Unlock()

		args := []string{"race", "-store", "interrupting://" + name, "-writers", "4", "-rounds", "10", "-shard", "s"}
		if asJSON {
			args = append(args, "-json")
		}
		r := wfContext(ctx, args...)
		require.Equal(t, exitInterrupted, r.code, "%s", r)
		assert.NotContains(t, r.stdout+r.stderr, "VIOLATION")
		assert.NotContains(t, r.stdout, "does not fence")
		assert.Contains(t, r.stderr, "stopped after 2 of 10 rounds: context canceled")
		if asJSON {
			m := jsonOf(t, r)
			assert.Equal(t, "interrupted", m["outcome"])
			assert.Equal(t, true, m["interrupted"])
			assert.Empty(t, m["violations"])
			assert.Len(t, m["results"], 2, "the rounds before the interrupt")
		} else {
			assert.Contains(t, r.stdout, "result: stopped after 2 of 10 rounds, none of them with a violation")
		}
		_, _, err := s.mem.Get(context.Background(), "writefence/s/writefence-race/s")
		require.ErrorIs(t, err, writefence.ErrNotFound, "the scratch record is deleted")
	}
}
