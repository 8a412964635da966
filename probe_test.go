package writefence_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/probecheck"
	"github.com/writefence/writefence/internal/testserver"
)

// lyingStore wraps MemStore and breaks one rule of the contract at a time.
type lyingStore struct {
	m writefence.MemStore

	ignoreIfNoneMatch bool   // create-only puts overwrite an existing key
	ignoreIfMatch     bool   // updates land whatever version they carry
	createOnMissing   bool   // an update of a missing key creates it
	sameVersion       bool   // every version is "v"
	readVersion       string // when set, the version every read reports
}

func (s *lyingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, v, err := s.m.Get(ctx, key)
	switch {
	case err != nil:
	case s.sameVersion:
		v = "v"
	case s.readVersion != "":
		v = s.readVersion
	}
	return data, v, err
}

func (s *lyingStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	_, current, err := s.m.Get(ctx, key)
	exists := err == nil
	var v string
	switch {
	case expect == "" && exists && s.ignoreIfNoneMatch,
		expect != "" && exists && s.ignoreIfMatch,
		expect != "" && !exists && s.createOnMissing:
		v, err = unconditionalPut(ctx, &s.m, key, data)
	default:
		if expect != "" && exists && expect == "v" && s.sameVersion {
			expect = current
		}
		v, err = s.m.PutIfVersion(ctx, key, data, expect)
	}
	if err == nil && s.sameVersion {
		v = "v"
	}
	return v, err
}

func (s *lyingStore) Delete(ctx context.Context, key string) error { return s.m.Delete(ctx, key) }

func TestProbeVerdicts(t *testing.T) {
	cases := []struct {
		name  string
		store writefence.ConditionalStore
		check string // "" means the probe passes
	}{
		{"memstore", &writefence.MemStore{}, ""},
		// A sequential probe cannot catch a client-side compare: every
		// request it makes is answered correctly, and only a write racing
		// between the compare and the write is lost. The conformance
		// suite's races catch that store; the probe is for stores that
		// ignore preconditions outright.
		{"client-side compare", clientCompare(&writefence.MemStore{}), ""},
		{"ignores every precondition", ignoring(&writefence.MemStore{}), probecheck.CreateRefused},
		{"ignores If-None-Match", &lyingStore{ignoreIfNoneMatch: true}, probecheck.CreateRefused},
		{"ignores If-Match", &lyingStore{ignoreIfMatch: true}, probecheck.StaleRefused},
		{"creates on a missing-key update", &lyingStore{createOnMissing: true}, probecheck.MissingRefused},
		{"repeats a version", &lyingStore{sameVersion: true}, probecheck.Update},
		{"reads another version", &lyingStore{readVersion: "other"}, probecheck.ReadBack},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := writefence.Probe(t.Context(), tc.store, "scratch/probe")
			if tc.check == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, writefence.ErrUntrustedStore)
			var pe *writefence.ProbeError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.check, pe.Check)
			assert.True(t, strings.HasPrefix(pe.Key, "scratch/probe-"), pe.Key)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: untrusted store: probe at scratch/probe-"), err.Error())
			assert.Contains(t, err.Error(), tc.check)
			assert.NotErrorIs(t, err, writefence.ErrConflict, "a verdict is not a conflict")
			t.Log(err)
		})
	}
}

// TestProbeCleansUp: with a Deleter the probe leaves nothing; without one it
// leaves the scratch key and never the missing key.
func TestProbeCleansUp(t *testing.T) {
	mem := &writefence.MemStore{}
	for range 3 {
		require.NoError(t, writefence.Probe(t.Context(), mem, "p"))
	}
	assert.Empty(t, testserver.Keys(t, mem))

	behind := &writefence.MemStore{}
	noDelete := clientCompare(behind)
	require.NoError(t, writefence.Probe(t.Context(), noDelete, "p"))
	require.NoError(t, writefence.Probe(t.Context(), noDelete, "p"), "a leftover of an earlier probe must not fail the next")
	keys := testserver.Keys(t, behind)
	assert.Len(t, keys, 2)
	for _, k := range keys {
		assert.NotContains(t, k, "absent")
	}

	lying := &lyingStore{createOnMissing: true}
	require.ErrorIs(t, writefence.Probe(t.Context(), lying, "p"), writefence.ErrUntrustedStore)
	assert.Empty(t, testserver.Keys(t, &lying.m), "the key a lying store created is deleted too")
}

// failingAfter returns a store that fails every read and write after the
// first pass of them with fakestore.ErrLostReply, until healed is set.
func failingAfter(pass int64, healed *atomic.Bool) fakestore.Store {
	var calls atomic.Int64
	return fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.Declared, Before: func(_ context.Context, c fakestore.Call) error {
		if (c.Op == fakestore.Get || c.Op == fakestore.Put) && calls.Add(1) > pass && !healed.Load() {
			return fakestore.ErrLostReply
		}
		return nil
	}})
}

// TestProbeFailureIsNoVerdict: a store that fails at any step of the probe
// is reported as failing, never as lying.
func TestProbeFailureIsNoVerdict(t *testing.T) {
	for pass := range int64(10) {
		s := failingAfter(pass, &atomic.Bool{})
		err := writefence.Probe(t.Context(), s, "p")
		require.ErrorIs(t, err, fakestore.ErrLostReply, "failing after %d calls", pass)
		assert.NotErrorIs(t, err, writefence.ErrUntrustedStore)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
		assert.True(t, strings.HasPrefix(err.Error(), "writefence: probe at p-"), err.Error())
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := writefence.Probe(ctx, &writefence.MemStore{}, "p")
	require.Equal(t, context.Canceled, err, "a done ctx passes through untouched")

	var ia *writefence.InvalidArgumentError
	require.ErrorAs(t, writefence.Probe(t.Context(), nil, "p"), &ia)
	assert.Equal(t, "store", ia.Arg)
	require.ErrorAs(t, writefence.Probe(t.Context(), &writefence.MemStore{}, ""), &ia)
	assert.Equal(t, "key", ia.Arg)
}

// TestFenceProbeRefusesUntrustedStore: the first push over a store that
// ignores preconditions is refused and writes no record; the verdict is
// kept, so later pushes are refused without touching the store.
func TestFenceProbeRefusesUntrustedStore(t *testing.T) {
	store := ignoring(&writefence.MemStore{})
	f := &writefence.Fence{Store: store, Probe: true}

	err := f.Push(t.Context(), "wal", "0", "w", 1, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrUntrustedStore)
	var pe *writefence.ProbeError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, probecheck.CreateRefused, pe.Check)
	assert.True(t, strings.HasPrefix(pe.Key, keys.DefaultPrefix+"_probe-"), pe.Key)
	_, _, err = store.Get(t.Context(), mustKey(t, "wal", "0"))
	require.ErrorIs(t, err, writefence.ErrNotFound, "no record was written")

	before := roundTrips(store)
	require.ErrorIs(t, f.Push(t.Context(), "wal", "0", "w", 2, []byte("x")), writefence.ErrUntrustedStore)
	assert.Equal(t, before, roundTrips(store), "the verdict is kept")

	// Without the option the fence trusts the store.
	require.NoError(t, (&writefence.Fence{Store: store}).Push(t.Context(), "wal", "0", "w", 1, []byte("x")))
}

// TestFenceProbeUnderAnotherBrand: a Fence that verifies the brand before
// every write writes no probe key while the brand holds another identity
// (promise 10); once the brand is its own, it probes and writes.
func TestFenceProbeUnderAnotherBrand(t *testing.T) {
	store := counted(&writefence.MemStore{})
	brand := keys.Brand("")
	_, err := store.PutIfVersion(t.Context(), brand, []byte("other/v9"), "")
	require.NoError(t, err)
	f := &writefence.Fence{Store: store, Probe: true, Brand: writefence.BrandVerifyAlways}

	err = f.Push(t.Context(), "wal", "0", "w", 1, []byte("x"))
	var we *writefence.WireError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, int64(1), store.Calls(fakestore.Put), "no write but the brand's")

	_, v, err := store.Get(t.Context(), brand)
	require.NoError(t, err)
	_, err = store.PutIfVersion(t.Context(), brand, []byte("writefence/v1"), v)
	require.NoError(t, err)
	require.NoError(t, f.Push(t.Context(), "wal", "0", "w", 1, []byte("x")))
	assert.Greater(t, store.Calls(fakestore.Put), int64(3), "the probe ran, then the push")
}

// TestFenceProbeOnce: a passing probe runs once, however many pushes start
// together; a failure to probe is not kept.
func TestFenceProbeOnce(t *testing.T) {
	counting := counted(&writefence.MemStore{})
	f := &writefence.Fence{Store: counting, Probe: true}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			assert.NoError(t, f.Push(t.Context(), "wal", string(rune('a'+i)), "w", 1, nil))
		})
	}
	wg.Wait()
	// One probe: 5 puts and 7 gets (each write that lands is read back by
	// Get and by GetPrefix, which a store without PrefixReader serves with
	// Get); then one get and one put per push.
	assert.Equal(t, int64(5+16), counting.Calls(fakestore.Put))
	assert.Equal(t, int64(7+16), counting.Calls(fakestore.Get))

	var healed atomic.Bool
	failing := failingAfter(3, &healed)
	f = &writefence.Fence{Store: failing, Probe: true}
	err := f.Push(t.Context(), "wal", "0", "w", 1, nil)
	require.ErrorIs(t, err, fakestore.ErrLostReply)
	assert.NotErrorIs(t, err, writefence.ErrUntrustedStore)
	healed.Store(true)
	require.NoError(t, f.Push(t.Context(), "wal", "0", "w", 1, nil), "a failed probe is run again")
	_, _, _, err = f.Latest(t.Context(), "wal", "0")
	require.NoError(t, err)
}

// TestFenceProbeWaitHonoursContext: a push waiting for another push's probe
// gives up when its ctx ends.
func TestFenceProbeWaitHonoursContext(t *testing.T) {
	blocked := &fakestore.Gate{} // holds the first write
	f := &writefence.Fence{Store: fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.Declared, Faults: []fakestore.Fault{{Op: fakestore.Put, Times: 1, Gate: blocked}}}), Probe: true}
	first := make(chan error, 1)
	go func() { first <- f.Push(context.Background(), "wal", "0", "w", 1, nil) }()
	<-blocked.Arrived()

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, f.Push(ctx, "wal", "1", "w", 1, nil), context.Canceled)
	blocked.Open()
	require.NoError(t, <-first)
}

// TestProbeTakesTheFencesPath: the probe writes through the methods a
// Fence uses on the store, so a store whose declared parts path or branded
// path is broken fails it although its PutIfVersion is correct; and a
// Fence over it is refused before it writes.
func TestProbeTakesTheFencesPath(t *testing.T) {
	for name, opts := range map[string]func(mem *writefence.MemStore) fakestore.Options{
		// A PartsPutter that ignores every precondition, while
		// PutIfVersion is correct: the path a Fence takes is the broken one.
		"parts": func(mem *writefence.MemStore) fakestore.Options {
			return fakestore.Options{PutParts: func(ctx context.Context, key string, parts [][]byte, _ string) (string, error) {
				return unconditionalPut(ctx, mem, key, bytes.Join(parts, nil))
			}}
		},
		// A BrandedPutter that never reads the brand.
		"brand": func(mem *writefence.MemStore) fakestore.Options {
			return fakestore.Options{PutIfBranded: func(ctx context.Context, _, _, key string, parts [][]byte, expect string) (string, error) {
				return mem.PutIfVersion(ctx, key, bytes.Join(parts, nil), expect)
			}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			mem := &writefence.MemStore{}
			s := fakestore.New(mem, opts(mem))
			err := writefence.Probe(t.Context(), s, "probe")
			require.ErrorIs(t, err, writefence.ErrUntrustedStore)
			require.ErrorIs(t, (&writefence.Fence{Store: s, Probe: true}).Push(t.Context(), "wal", "0", "w", 1, nil), writefence.ErrUntrustedStore)
		})
	}
}
