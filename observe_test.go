package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// outcomeCounter observes a Fence and counts what happened, told apart
// by the event's error as a user's observer would.
type outcomeCounter struct {
	mu     sync.Mutex // guards counts and events
	counts map[string]int
	events []writefence.WriteEvent
}

// outcome names what an event says happened.
func eventOutcome(e writefence.WriteEvent) string {
	switch err := e.Err; {
	case err == nil:
		return "landed"
	case e.Retrying:
		return "conflict-retried"
	case errors.Is(err, writefence.ErrOutcomeUnknown):
		return "unknown"
	case errors.Is(err, writefence.ErrWire):
		return "wire"
	case errors.Is(err, writefence.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, writefence.ErrStaleEpoch):
		return "stale"
	case errors.Is(err, writefence.ErrConflict):
		return "conflict"
	}
	return "failed"
}

func (c *outcomeCounter) observe(_ context.Context, e writefence.WriteEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[string]int)
	}
	c.counts[eventOutcome(e)]++
	c.events = append(c.events, e)
}

func (c *outcomeCounter) last() writefence.WriteEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[len(c.events)-1]
}

func TestObserverSeesEveryOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	obs := &outcomeCounter{}
	mem := &writefence.MemStore{}
	store := counted(mem)
	f := &writefence.Fence{Store: store, Observer: obs.observe}

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")))
	e := obs.last()
	assert.False(t, e.Start.IsZero(), "the event carries the write's start")
	assert.Equal(t, writefence.WriteEvent{Op: "push", Key: mustKey(t, "wal", "0"), Writer: "a", Epoch: 1, Attempt: 1, Start: e.Start}, e)

	require.ErrorIs(t, f.Push(ctx, "wal", "0", "b", 1, []byte("y")), writefence.ErrStaleEpoch)
	assert.Equal(t, "stale", eventOutcome(obs.last()))
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, obs.last().Err, &stale)
	assert.Equal(t, uint64(1), stale.RecordedEpoch)

	store.Inject(conflicts(2))
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, []byte("x")))
	assert.Equal(t, 2, obs.counts["conflict-retried"])
	assert.Equal(t, 3, obs.last().Attempt)

	store.Inject(lostReplies(1))
	store.Inject(readsFail)
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 3, []byte("x")), writefence.ErrOutcomeUnknown)
	assert.Equal(t, "unknown", eventOutcome(obs.last()))
	store.Clear(fakestore.Get)

	require.NoError(t, (&writefence.Fence{Store: mem, Identity: "other"}).Push(ctx, "wal", "1", "z", 1, nil))
	require.ErrorIs(t, f.Push(ctx, "wal", "1", "a", 2, nil), writefence.ErrWire)
	assert.Equal(t, "wire", eventOutcome(obs.last()))

	_, err := mem.PutIfVersion(ctx, mustKey(t, "wal", "2"), []byte("garbage"), "")
	require.NoError(t, err)
	require.ErrorIs(t, f.Push(ctx, "wal", "2", "a", 1, nil), writefence.ErrCorrupt)
	assert.Equal(t, "corrupt", eventOutcome(obs.last()))

	store.Inject(conflicts(0))
	f.MaxAttempts = 2
	require.ErrorIs(t, f.Push(ctx, "wal", "3", "a", 1, nil), writefence.ErrConflict)
	assert.Equal(t, "conflict", eventOutcome(obs.last()))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, f.Push(cctx, "wal", "3", "a", 1, nil), context.Canceled)
	assert.Equal(t, "failed", eventOutcome(obs.last()))

	// Invalid arguments are refused before a push exists: not observed.
	n := len(obs.events)
	require.ErrorIs(t, f.Push(ctx, "", "0", "a", 1, nil), writefence.ErrInvalidArgument)
	assert.Len(t, obs.events, n)
	for _, o := range []string{"landed", "stale", "conflict-retried", "conflict", "wire", "corrupt", "unknown", "failed"} {
		assert.Positive(t, obs.counts[o], "outcome %s never observed", o)
	}
}

func TestSlogObserverEscapes(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := &writefence.Fence{Store: &writefence.MemStore{}, Observer: writefence.SlogObserver(logger)}
	ctx := context.Background()
	require.NoError(t, f.Push(ctx, "wal", "0", "evil\nwriter", 2, nil))
	require.Error(t, f.Push(ctx, "wal", "0", "b", 1, nil))
	out := buf.String()
	assert.Contains(t, out, "level=DEBUG")
	assert.Contains(t, out, "outcome=landed")
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "outcome=stale")
	assert.Equal(t, 2, bytes.Count(buf.Bytes(), []byte("\n")), "no forged log lines:\n%s", out)
}

// ExampleFence_observer counts what happens to a Fence's writes: the
// event's error tells, tested like the error Push returns.
func ExampleFence_observer() {
	ctx := context.Background()
	var mu sync.Mutex
	landed, stale := 0, 0
	f := &writefence.Fence{
		Store: &writefence.MemStore{},
		Observer: func(_ context.Context, e writefence.WriteEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.Err == nil:
				landed++
			case errors.Is(e.Err, writefence.ErrStaleEpoch):
				stale++
			}
		},
	}
	_ = f.Push(ctx, "wal", "0", "node-a", 1, []byte("segment 1"))
	_ = f.Push(ctx, "wal", "0", "node-a", 2, []byte("segment 2"))
	err := f.Push(ctx, "wal", "0", "zombie", 1, []byte("late"))
	fmt.Println(errors.Is(err, writefence.ErrStaleEpoch))
	fmt.Println("landed:", landed, "stale:", stale)
	// Output:
	// true
	// landed: 2 stale: 1
}

// Outcome names each kind of event as the SlogObserver logs it; an error
// that matches several sentinels takes the first name.
func TestWriteEventOutcome(t *testing.T) {
	for _, tc := range []struct {
		e    writefence.WriteEvent
		want string
	}{
		{writefence.WriteEvent{}, "landed"},
		{writefence.WriteEvent{Err: writefence.ErrConflict, Retrying: true}, "conflict-retried"},
		{writefence.WriteEvent{Err: &writefence.ProbeError{Check: "stale update is refused"}}, "untrusted"},
		{writefence.WriteEvent{Err: &writefence.OutcomeUnknownError{Err: writefence.ErrStaleEpoch}}, "unknown"},
		{writefence.WriteEvent{Err: &writefence.WireError{Absent: true}}, "wire"},
		{writefence.WriteEvent{Err: &writefence.CorruptError{}}, "corrupt"},
		{writefence.WriteEvent{Err: &writefence.StaleEpochError{}}, "stale"},
		{writefence.WriteEvent{Err: writefence.ErrLeaseLost}, "lease"},
		{writefence.WriteEvent{Err: writefence.ErrConflict}, "conflict"},
		{writefence.WriteEvent{Err: context.Canceled}, "failed"},
	} {
		assert.Equal(t, tc.want, tc.e.Outcome(), "%v", tc.e.Err)
	}
}

// TestObserverSeesCollectsHorizon: Collect's write of a record's horizon
// is seen as Op "collect", with no writer and no epoch, as WriteEvent says.
func TestObserverSeesCollectsHorizon(t *testing.T) {
	ctx := t.Context()
	now := time.Unix(1_000_000, 0)
	obs := &outcomeCounter{}
	f := &writefence.Fence{Store: &writefence.MemStore{Clock: func() time.Time { return now }}, Observer: obs.observe}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil }))
	_, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader("stray"))
	require.NoError(t, err)
	now = now.Add(2 * time.Hour)
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1)
	e := obs.last()
	assert.Equal(t, writefence.WriteEvent{Op: "collect", Key: mustKey(t, "wal", "0"), Attempt: 1, Start: e.Start}, e)
}
