package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// requireDeposedBy fails unless ctx was cancelled by a stale refusal of op
// at epoch, with the store recording recorded by writer.
func requireDeposedBy(t *testing.T, ctx context.Context, op string, epoch, recorded uint64, writer string) {
	t.Helper()
	require.ErrorIs(t, ctx.Err(), context.Canceled, "cancelled by the time the refused write returned")
	cause := context.Cause(ctx)
	require.ErrorIs(t, cause, writefence.ErrStaleEpoch)
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, cause, &stale)
	assert.Equal(t, writefence.StaleEpochError{Op: op, Key: mustKey(t, "wal", "0"), Epoch: epoch,
		RecordedEpoch: recorded, RecordedWriter: writer}, *stale)
}

// A stale refusal of a push, a seal, an update or a commit cancels the
// shard's Deposed context before the call returns, with the refusal as its
// cause (promise 18).
func TestDeposedByStaleRefusal(t *testing.T) {
	for _, tc := range []struct {
		op    string
		write func(ctx context.Context, f *writefence.Fence) error
	}{
		{"push", func(ctx context.Context, f *writefence.Fence) error {
			return f.Push(ctx, "wal", "0", "a", 4, []byte("segment"))
		}},
		{"seal", func(ctx context.Context, f *writefence.Fence) error { return f.Seal(ctx, "wal", "0", "a", 4) }},
		{"update", func(ctx context.Context, f *writefence.Fence) error {
			return f.Update(ctx, "wal", "0", "a", 4, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil })
		}},
		{"commit", func(ctx context.Context, f *writefence.Fence) error {
			return f.Commit(ctx, "wal", "0", "a", 4, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Payload = append(m.Payload, '+')
				return m, nil
			})
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			f := &writefence.Fence{Store: mem}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()
			other, stopOther := f.Deposed(ctx, "wal", "1")
			defer stopOther()

			require.NoError(t, tc.write(ctx, f), "the first write lands")
			require.NoError(t, dctx.Err())
			require.NoError(t, (&writefence.Fence{Store: mem}).Seal(ctx, "wal", "0", "b", 7))

			err := tc.write(ctx, f)
			require.ErrorIs(t, err, writefence.ErrStaleEpoch)
			requireDeposedBy(t, dctx, tc.op, 4, 7, "b")
			require.NoError(t, other.Err(), "another shard's context is untouched")
		})
	}
}

// A conflict that is retried and lands never deposes: injected conflicts,
// then the write lands.
func TestDeposedNotByInjectedConflicts(t *testing.T) {
	ctx := t.Context()
	conflicts := counted(&writefence.MemStore{}, conflicts(3))
	obs := &outcomeCounter{}
	f := &writefence.Fence{Store: conflicts, Observer: obs.observe}
	dctx, stop := f.Deposed(ctx, "wal", "0")
	defer stop()

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("segment")))
	assert.Equal(t, [2]int64{4, 1}, [2]int64{conflicts.Calls(fakestore.Put), conflicts.OK(fakestore.Put)}, "3 writes refused, then the one that landed")
	assert.Equal(t, 3, obs.counts["conflict-retried"])
	require.NoError(t, dctx.Err(), "a retried conflict that landed does not depose")
}

// The race itself, forced: the write reads, a rival lands a write before
// the write's conditional put, which conflicts; the retry reads afresh. A
// rival at a lower epoch leaves the write admissible, and it lands: no
// cancellation. A rival at a higher epoch makes the retry a stale refusal:
// cancelled, with the rival's epoch in the cause.
func TestDeposedRacedConflict(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rivalEpoch  uint64
		wantDeposed bool
	}{
		{"rival below: retried and landed", 2, false},
		{"rival above: retried and refused", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "old", 1, []byte("segment 1")))
			// The first write is held, so that a rival's write can land
			// between a's read and its conditional write: the
			// interleaving that makes it conflict.
			gate := &fakestore.Gate{}
			obs := &outcomeCounter{}
			f := &writefence.Fence{Store: counted(mem, fakestore.Fault{Op: fakestore.Put, Times: 1, Gate: gate}), Observer: obs.observe}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()

			done := make(chan error, 1)
			go func() { done <- f.Push(ctx, "wal", "0", "a", 3, []byte("segment 2")) }()
			<-gate.Arrived() // a's write, decided on epoch 1, is held
			require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "rival", tc.rivalEpoch, []byte("rival")))
			gate.Open()
			err := <-done

			assert.Equal(t, 1, obs.counts["conflict-retried"], "the held write conflicted once")
			if !tc.wantDeposed {
				require.NoError(t, err)
				require.NoError(t, dctx.Err(), "a conflict retried and landed does not depose")
				requireLatest(t, f, 3, "a", "segment 2")
				return
			}
			require.ErrorIs(t, err, writefence.ErrStaleEpoch)
			requireDeposedBy(t, dctx, "push", 3, tc.rivalEpoch, "rival")
		})
	}
}

// Only refusals after the call count, only of this Fence's writes, and
// only of a writer's writes: not a Settle's, not an unknown outcome.
func TestDeposedScope(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 5, []byte("segment")))
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 3, nil), writefence.ErrStaleEpoch)

	dctx, stop := f.Deposed(ctx, "wal", "0")
	defer stop()
	require.NoError(t, dctx.Err(), "a refusal before the call does not count")

	other := &writefence.Fence{Store: mem}
	require.ErrorIs(t, other.Push(ctx, "wal", "0", "a", 3, nil), writefence.ErrStaleEpoch)
	require.NoError(t, dctx.Err(), "another Fence's refusal does not count")

	// A record whose payload is damaged under an intact header: Settle
	// below its epoch is refused as stale, and deposes nobody.
	key := mustKey(t, "wal", "0")
	data, version, err := mem.Get(ctx, key)
	require.NoError(t, err)
	data[len(data)-1] ^= 0xff
	version, err = mem.PutIfVersion(ctx, key, data, version)
	require.NoError(t, err)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: version, Writer: "op", Epoch: 4, Payload: []byte("restored")})
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	require.NoError(t, dctx.Err(), "a refused settle does not depose")

	// A push whose reply was lost and whose record cannot be read back:
	// the outcome is unknown, not a refusal.
	lost := counted(&writefence.MemStore{})
	lf := &writefence.Fence{Store: lost, MaxAttempts: 2}
	lctx, lstop := lf.Deposed(ctx, "wal", "0")
	defer lstop()
	require.NoError(t, lf.Push(ctx, "wal", "0", "a", 1, nil))
	lost.Inject(lostReplies(1))
	lost.Inject(readsFail)
	require.ErrorIs(t, lf.Push(ctx, "wal", "0", "a", 2, nil), writefence.ErrOutcomeUnknown)
	require.NoError(t, lctx.Err(), "an unknown outcome does not depose")
}

// stop, the parent's end and an invalid shard each end the context with
// their own cause; a refusal after stop changes nothing.
func TestDeposedEnds(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 9))

	dctx, stop := f.Deposed(ctx, "wal", "0")
	stop()
	require.ErrorIs(t, context.Cause(dctx), context.Canceled)
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 3, nil), writefence.ErrStaleEpoch)
	require.NotErrorIs(t, context.Cause(dctx), writefence.ErrStaleEpoch, "stopped first: the cause stays")

	errShutdown := errors.New("shutting down")
	parent, cancel := context.WithCancelCause(ctx)
	pctx, pstop := f.Deposed(parent, "wal", "0")
	defer pstop()
	cancel(errShutdown)
	require.ErrorIs(t, context.Cause(pctx), errShutdown)

	bad, bstop := f.Deposed(ctx, "", "0")
	defer bstop()
	require.ErrorIs(t, bad.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(bad), writefence.ErrInvalidArgument)
}

// Every pipeline goroutine watching the shard learns of one refusal, made
// by any of them, while the others keep pushing.
func TestDeposedConcurrentWatchers(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	require.NoError(t, (&writefence.Fence{Store: mem}).Seal(ctx, "wal", "0", "b", 1000))
	const n = 8
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		var stop context.CancelFunc
		ctxs[i], stop = f.Deposed(ctx, "wal", "0")
		defer stop()
	}
	errs := together(n, func(i int) error {
		return f.Push(ctxs[i], "wal", "0", "a", uint64(i+1), []byte("segment"))
	})
	for i, err := range errs {
		// Each push is refused as stale, or, cancelled by another's
		// refusal first, returns that cancellation.
		if !errors.Is(err, writefence.ErrStaleEpoch) {
			require.ErrorIs(t, err, context.Canceled, "push %d", i)
		}
	}
	for i, dctx := range ctxs {
		var stale *writefence.StaleEpochError
		require.ErrorAs(t, context.Cause(dctx), &stale, "context %d", i)
		assert.Equal(t, uint64(1000), stale.RecordedEpoch)
	}
}

// ExampleFence_Deposed stops a shard's pipeline at the first write the
// store refuses as stale, instead of shipping segments it will keep
// refusing.
func ExampleFence_Deposed() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fence := &writefence.Fence{Store: store}

	shipping, stop := fence.Deposed(ctx, "wal", "0")
	defer stop()
	for i := uint64(1); shipping.Err() == nil; i++ {
		if i == 3 {
			// A new writer takes the shard over and seals it.
			_ = (&writefence.Fence{Store: store}).Seal(ctx, "wal", "0", "node-b", 100)
		}
		err := fence.Push(shipping, "wal", "0", "node-a", i, []byte("segment"))
		fmt.Printf("segment %d: %v\n", i, err)
	}
	fmt.Println("stopped:", context.Cause(shipping))
	// Output:
	// segment 1: <nil>
	// segment 2: <nil>
	// segment 3: writefence: stale epoch: push at epoch 3 to writefence/s/wal/0 refused: recorded epoch 100 by node-b
	// stopped: writefence: stale epoch: push at epoch 3 to writefence/s/wal/0 refused: recorded epoch 100 by node-b
}

// TestDeposedNotByTheCallersError: an Update's or a Commit's next that
// fails with an error of its own which wraps a *StaleEpochError (here a
// Check of a sibling shard that another writer took over) is no refusal
// of the shard's write: the writer still holds the shard, and its Deposed
// context must not end, least of all with a cause that names another key
// (promise 18).
func TestDeposedNotByTheCallersError(t *testing.T) {
	for _, tc := range []struct {
		op    string
		write func(ctx context.Context, f *writefence.Fence, next func() error) error
	}{
		{"update", func(ctx context.Context, f *writefence.Fence, next func() error) error {
			return f.Update(ctx, "wal", "0", "a", 2, func(cur []byte) ([]byte, error) { return cur, next() })
		}},
		{"commit", func(ctx context.Context, f *writefence.Fence, next func() error) error {
			return f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) { return m, next() })
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			f := &writefence.Fence{Store: mem}
			require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1))
			require.NoError(t, f.Seal(ctx, "wal", "1", "a", 1))
			require.NoError(t, (&writefence.Fence{Store: mem}).Seal(ctx, "wal", "1", "b", 9))
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()

			sibling := func() error { return f.Check(ctx, "wal", "1", "a", 1) }
			err := tc.write(ctx, f, sibling)
			require.ErrorIs(t, err, writefence.ErrStaleEpoch, "next's own error is returned")
			require.NoError(t, f.Check(ctx, "wal", "0", "a", 1), "a still holds wal/0")
			require.NoError(t, dctx.Err(), "cancelled with cause %v", context.Cause(dctx))
		})
	}
}

// However a Deposed context ends, the Fence forgets it: a long-lived Fence
// does not grow with the pipelines it has served. synctest.Wait lets the
// contexts' AfterFuncs run to completion before the count is read.
func TestDeposedForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &writefence.Fence{Store: &writefence.MemStore{}}
		ctx := context.Background()
		if err := f.Seal(ctx, "wal", "0", "b", 9); err != nil {
			t.Fatal(err)
		}

		_, stop := f.Deposed(ctx, "wal", "0")
		parent, cancel := context.WithCancel(ctx)
		_, pstop := f.Deposed(parent, "wal", "0")
		defer pstop()
		refused, rstop := f.Deposed(ctx, "wal", "0")
		defer rstop()
		kept, kstop := f.Deposed(ctx, "wal", "1")
		if got := writefence.DeposedContexts(f); got != 4 {
			t.Fatalf("%d contexts registered, want 4", got)
		}

		stop()
		cancel()
		if err := f.Push(ctx, "wal", "0", "a", 3, nil); err == nil {
			t.Fatal("a push below the seal landed")
		}
		synctest.Wait()
		if refused.Err() == nil {
			t.Fatal("the refusal did not cancel the shard's context")
		}
		if kept.Err() != nil {
			t.Fatal("another shard's context was cancelled")
		}
		if got := writefence.DeposedContexts(f); got != 1 {
			t.Fatalf("%d contexts still registered, want 1 (the other shard's)", got)
		}
		kstop()
		synctest.Wait()
		if got := writefence.DeposedContexts(f); got != 0 {
			t.Fatalf("%d contexts still registered after every one ended", got)
		}
	})
}
