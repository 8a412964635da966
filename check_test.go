package writefence_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
)

// TestCheck: before and after a takeover, and each refusal.
func TestCheck(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		a, b := &writefence.Fence{Store: s}, &writefence.Fence{Store: s}
		key := mustKey(t, "wal", "0")
		require.NoError(t, a.Seal(ctx, "wal", "0", "a", 10))
		require.NoError(t, a.Commit(ctx, "wal", "0", "a", 12, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil }))
		for _, e := range []uint64{10, 11, 12} {
			require.NoError(t, a.Check(ctx, "wal", "0", "a", e), "epoch %d of the tenure", e)
		}
		requireRegressed(t, a.Check(ctx, "wal", "0", "a", 13),
			writefence.EpochRegressedError{Op: "check", Key: key, Epoch: 13, Seen: 13, SeenWriter: "a", Found: 12, FoundWriter: "a"})

		require.NoError(t, b.Seal(ctx, "wal", "0", "b", 20))
		err := a.Check(ctx, "wal", "0", "a", 12)
		var se *writefence.StaleEpochError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, writefence.StaleEpochError{Op: "check", Key: key, Epoch: 12, RecordedEpoch: 20, RecordedWriter: "b"}, *se)
		assert.Equal(t, "writefence: stale epoch: check at epoch 12 to "+key+" refused: recorded epoch 20 by b", err.Error())
		require.NoError(t, b.Check(ctx, "wal", "0", "b", 20))
		require.ErrorIs(t, b.Check(ctx, "wal", "0", "b", 19), writefence.ErrStaleEpoch, "below the seal's tenure")

		errs := a.CheckAll(ctx, []writefence.Tenure{
			{Plugin: "wal", Shard: "0", Writer: "a", Epoch: 12},
			{Plugin: "wal", Shard: "0", Writer: "b", Epoch: 20},
			{Plugin: "wal", Shard: "1", Writer: "b", Epoch: 20},
			{Plugin: "", Shard: "0", Writer: "b", Epoch: 20},
		})
		require.Len(t, errs, 4)
		assert.ErrorIs(t, errs[0], writefence.ErrStaleEpoch)
		assert.NoError(t, errs[1])
		assert.ErrorIs(t, errs[2], writefence.ErrEpochRegressed, "a shard without a record holds nobody")
		assert.ErrorIs(t, errs[3], writefence.ErrInvalidArgument)

		canceled, cancel := context.WithCancel(ctx)
		cancel()
		for _, err := range a.CheckAll(canceled, make([]writefence.Tenure, 40)) {
			assert.Error(t, err)
		}

		require.ErrorIs(t, b.Check(ctx, "wal", "0", "b", 0), writefence.ErrInvalidArgument)
		require.ErrorIs(t, b.Check(ctx, "wal", "0", "", 20), writefence.ErrInvalidArgument)
		other := &writefence.Fence{Store: s, Identity: "other/v1"}
		require.ErrorIs(t, other.Check(ctx, "wal", "0", "b", 20), writefence.ErrWire)
		setBack(t, s, key, []byte("garbage"))
		require.ErrorIs(t, b.Check(ctx, "wal", "0", "b", 20), writefence.ErrCorrupt)
	})
}

// TestCollectStopsOnASetBackWithinTheEpoch: a record set back from outside,
// between two of Collect's batches of deletes, to a record of the same
// epoch and writer (which no check of the epoch or the Fence's sight
// catches) whose collection horizon or tenure floor is below the one the
// collection judged by, stops the deletes: under that record the writer
// may commit the blobs left again, and does (promise 32). On a store
// without a batch delete a batch is 100 blobs.
//
//   - horizon: the blobs are aged, and Collect raised the horizon over
//     them; the record goes back to its content before the raise.
//   - floor: the blobs are below the floor of the writer's seal; the
//     record goes back to one of the same epoch and writer whose tenure
//     began before them (restored from another history of the shard).
func TestCollectStopsOnASetBackWithinTheEpoch(t *testing.T) {
	const n, batch = 250, 100
	for _, c := range []string{"horizon", "floor"} {
		t.Run(c, func(t *testing.T) {
			ctx := t.Context()
			clock := &fakeclock.Clock{}
			mem := &writefence.MemStore{Clock: clock.Now}
			key := mustKey(t, "wal", "0")
			var mu sync.Mutex // guards back, deleted and setBackErr
			var back []byte   // what the record is set back to after the first batch
			var deleted int   // the blobs deleted so far
			var setBackErr error
			s := fakestore.New(mem, fakestore.Options{
				Hide: fakestore.BlobBatchDeleter,
				After: func(ctx context.Context, call fakestore.Call, err error) error {
					mu.Lock()
					defer mu.Unlock()
					if call.Op == fakestore.DeleteBlob && err == nil && back != nil {
						if deleted++; deleted == batch {
							_, v, gerr := mem.Get(ctx, key)
							if setBackErr = gerr; gerr == nil {
								_, setBackErr = mem.PutIfVersion(ctx, key, back, v)
							}
						}
					}
					return err
				},
			})
			a := &writefence.Fence{Store: s}
			require.NoError(t, a.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Payload = []byte("a's manifest")
				return m, nil
			}))
			var blobs []writefence.BlobRef
			for i := range n {
				ref, err := a.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader(fmt.Sprint(i)))
				require.NoError(t, err)
				blobs = append(blobs, ref)
			}
			epoch := uint64(1)
			switch c {
			case "horizon":
				// The record before Collect raises its horizon.
				mu.Lock()
				back, _, _ = mem.Get(ctx, key)
				mu.Unlock()
				clock.Advance(2 * time.Hour)
			case "floor":
				// In another history of the shard a pushed at epoch 2 in the
				// tenure of its commit; in this one it sealed epoch 2, a new
				// tenure that leaves the blobs of epoch 1 below its floor.
				other := &writefence.MemStore{}
				o := &writefence.Fence{Store: other}
				require.NoError(t, o.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) {
					m.Payload = []byte("a's manifest")
					return m, nil
				}))
				require.NoError(t, o.Push(ctx, "wal", "0", "a", 2, []byte("a's next manifest")))
				data, _, err := other.Get(ctx, key)
				require.NoError(t, err)
				mu.Lock()
				back = data
				mu.Unlock()
				require.NoError(t, (&writefence.Fence{Store: s}).Seal(ctx, "wal", "0", "a", 2))
				epoch = 2
			}

			report, err := (&writefence.Fence{Store: s}).Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			mu.Lock()
			require.NoError(t, setBackErr)
			mu.Unlock()
			require.ErrorIs(t, err, writefence.ErrEpochRegressed, "the record no longer holds the tenure the collection judged by")
			assert.Len(t, report.Deleted, batch, "the first batch, deleted before the record was set back")

			space, err := keys.Blobs("", "wal", "0")
			require.NoError(t, err)
			var left []string
			require.NoError(t, mem.ListBlobs(ctx, space, func(b writefence.BlobInfo) error {
				left = append(left, strings.TrimPrefix(b.Key, space))
				return nil
			}))
			require.Len(t, left, n-batch, "the blobs of the batches after the record was set back")

			// Under the record set back, a commits a blob left, which
			// every batch after the first would have deleted.
			i := slices.IndexFunc(blobs, func(r writefence.BlobRef) bool { return r.Name == left[0] })
			require.NoError(t, a.Commit(ctx, "wal", "0", "a", epoch+1, appendBlob(blobs[i])))
			got, err := readBlob(t, a, blobs[i].Name)
			require.NoError(t, err, "the committed blob exists")
			assert.Equal(t, fmt.Sprint(i), got)
		})
	}
}

// TestCheckStaleBelowASetBackRecord: promise 32 has Check return the
// refusal a write would meet. A writer whose epoch is at or below the
// record of another writer is deposed: its write is refused as stale
// (ErrStaleEpoch naming the recorded epoch and writer) even when the
// record went back below what was known of it, since staleness is the
// rule's refusal (see TestRecordSetBack). Check must say the same, not
// ErrEpochRegressed, on which a caller would wait for an operator rather
// than stand down. Known above the record: by the Fence's sight, or by
// the floor under KeepFloor.
func TestCheckStaleBelowASetBackRecord(t *testing.T) {
	for _, keepFloor := range []bool{false, true} {
		t.Run(fmt.Sprint("KeepFloor ", keepFloor), func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			key := mustKey(t, "wal", "0")
			b := &writefence.Fence{Store: mem, KeepFloor: keepFloor}
			require.NoError(t, b.Seal(ctx, "wal", "0", "b", 15))
			fifteen := bytesAt(t, mem, key)
			require.NoError(t, b.Seal(ctx, "wal", "0", "b", 20))
			setBack(t, mem, key, fifteen)

			f := b
			if keepFloor {
				f = &writefence.Fence{Store: mem, KeepFloor: true} // knows 20 from the floor alone
			}
			want := writefence.StaleEpochError{Op: "push", Key: key, Epoch: 12, RecordedEpoch: 15, RecordedWriter: "b"}
			var se *writefence.StaleEpochError
			require.ErrorAs(t, f.Push(ctx, "wal", "0", "a", 12, []byte("a's")), &se, "the write a would make")
			assert.Equal(t, want, *se)

			err := f.Check(ctx, "wal", "0", "a", 12)
			require.ErrorAs(t, err, &se, "Check returns the refusal the write met")
			want.Op = "check"
			assert.Equal(t, want, *se)
			assert.NotErrorIs(t, err, writefence.ErrEpochRegressed)
		})
	}
}

// TestCheckAllEachOwn: CheckAll answers each tenure as Check does, each of
// its own read: a shard listed twice is read and answered twice (held at
// one epoch, stale at the other), and a damaged record among sound ones
// fails its own tenures alone.
func TestCheckAllEachOwn(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	reads := counted(mem)
	f := &writefence.Fence{Store: reads}
	for _, shard := range []string{"0", "1", "2"} {
		require.NoError(t, f.Seal(ctx, "wal", shard, "a", 5))
	}
	setBack(t, mem, mustKey(t, "wal", "1"), []byte("garbage"))
	before := reads.Calls(fakestore.Get)

	errs := f.CheckAll(ctx, []writefence.Tenure{
		{Plugin: "wal", Shard: "0", Writer: "a", Epoch: 5},
		{Plugin: "wal", Shard: "1", Writer: "a", Epoch: 5},
		{Plugin: "wal", Shard: "0", Writer: "a", Epoch: 4},
		{Plugin: "wal", Shard: "2", Writer: "a", Epoch: 5},
		{Plugin: "wal", Shard: "1", Writer: "a", Epoch: 5},
		{Plugin: "wal", Shard: "0", Writer: "a", Epoch: 5},
	})
	require.Len(t, errs, 6)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], writefence.ErrCorrupt)
	assert.ErrorIs(t, errs[2], writefence.ErrStaleEpoch)
	assert.NoError(t, errs[3], "a damaged record fails its own tenures alone")
	assert.ErrorIs(t, errs[4], writefence.ErrCorrupt)
	assert.NoError(t, errs[5])
	assert.Equal(t, int64(6), reads.Calls(fakestore.Get)-before, "one read per tenure, a shard listed twice included")
}
