package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// outcomeCounter is an Observer that counts outcomes.
type outcomeCounter struct {
	mu     sync.Mutex // guards counts and events
	counts map[writefence.Outcome]int
	events []writefence.PushEvent
}

func (c *outcomeCounter) ObservePush(_ context.Context, e writefence.PushEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[writefence.Outcome]int)
	}
	c.counts[e.Outcome]++
	c.events = append(c.events, e)
}

func (c *outcomeCounter) last() writefence.PushEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[len(c.events)-1]
}

func TestObserverSeesEveryOutcome(t *testing.T) {
	ctx := context.Background()
	obs := &outcomeCounter{}
	mem := &writefence.MemStore{}
	conflicts := &conflictStore{ConditionalStore: mem}
	lost := &lostReplyStore{ConditionalStore: conflicts}
	f := &writefence.Fence{Store: lost, Observer: obs}

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")))
	assert.Equal(t, writefence.PushEvent{Op: "push", Key: mustKey(t, "wal", "0"), Writer: "a", Epoch: 1, Outcome: writefence.Landed, Attempt: 1}, obs.last())

	require.ErrorIs(t, f.Push(ctx, "wal", "0", "b", 1, []byte("y")), writefence.ErrStaleEpoch)
	assert.Equal(t, writefence.Stale, obs.last().Outcome)
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, obs.last().Err, &stale)
	assert.Equal(t, uint64(1), stale.RecordedEpoch)

	conflicts.mu.Lock()
	conflicts.remaining = 2
	conflicts.mu.Unlock()
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, []byte("x")))
	assert.Equal(t, 2, obs.counts[writefence.ConflictRetried])
	assert.Equal(t, 3, obs.last().Attempt)

	lost.set(1, true)
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 3, []byte("x")), writefence.ErrOutcomeUnknown)
	assert.Equal(t, writefence.Unknown, obs.last().Outcome)
	lost.set(0, false)

	require.NoError(t, (&writefence.Fence{Store: mem, Identity: "other"}).Push(ctx, "wal", "1", "z", 1, nil))
	require.ErrorIs(t, f.Push(ctx, "wal", "1", "a", 2, nil), writefence.ErrWire)
	assert.Equal(t, writefence.Wire, obs.last().Outcome)

	_, err := mem.PutIfVersion(ctx, mustKey(t, "wal", "2"), []byte("garbage"), "")
	require.NoError(t, err)
	require.ErrorIs(t, f.Push(ctx, "wal", "2", "a", 1, nil), writefence.ErrCorrupt)
	assert.Equal(t, writefence.Corrupt, obs.last().Outcome)

	conflicts.mu.Lock()
	conflicts.remaining = -1
	conflicts.mu.Unlock()
	f.MaxAttempts = 2
	require.ErrorIs(t, f.Push(ctx, "wal", "3", "a", 1, nil), writefence.ErrConflict)
	assert.Equal(t, writefence.Conflict, obs.last().Outcome)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, f.Push(cctx, "wal", "3", "a", 1, nil), context.Canceled)
	assert.Equal(t, writefence.Failed, obs.last().Outcome)

	// Invalid arguments are refused before a push exists: not observed.
	n := len(obs.events)
	require.ErrorIs(t, f.Push(ctx, "", "0", "a", 1, nil), writefence.ErrInvalidArgument)
	assert.Len(t, obs.events, n)
	for _, o := range []writefence.Outcome{writefence.Landed, writefence.Stale, writefence.ConflictRetried,
		writefence.Conflict, writefence.Wire, writefence.Corrupt, writefence.Unknown, writefence.Failed} {
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

func ExampleObserver() {
	ctx := context.Background()
	var mu sync.Mutex
	counts := map[writefence.Outcome]int{}
	f := &writefence.Fence{
		Store: &writefence.MemStore{},
		Observer: writefence.ObserverFunc(func(_ context.Context, e writefence.PushEvent) {
			mu.Lock()
			counts[e.Outcome]++
			mu.Unlock()
		}),
	}
	_ = f.Push(ctx, "wal", "0", "node-a", 1, []byte("segment 1"))
	_ = f.Push(ctx, "wal", "0", "node-a", 2, []byte("segment 2"))
	err := f.Push(ctx, "wal", "0", "zombie", 1, []byte("late"))
	fmt.Println(errors.Is(err, writefence.ErrStaleEpoch))
	fmt.Println("landed:", counts[writefence.Landed], "stale:", counts[writefence.Stale])
	// Output:
	// true
	// landed: 2 stale: 1
}
