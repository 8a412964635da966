package writefence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
)

// TestCollectKeepsAPlainRecordPlain: Collect's write of a collection
// horizon changes nothing else in the record (promise 1), and only a
// stream's record carries one. Over a plain record (format version 2),
// which its writer keeps with Push only, a blob of that writer at the
// record's epoch, never committed and older than the grace, is kept: the
// writer may yet commit it, and no horizon may say otherwise. Once a seal
// begins a new tenure it can never be committed, and goes.
func TestCollectKeepsAPlainRecordPlain(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	f := &writefence.Fence{Store: mem}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, []byte("a's state")))
	putBlob(t, f, "a", 3, "an upload a never committed")
	before, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	require.False(t, before.Stream, "a plain record")
	plain := bytesAt(t, mem, mustKey(t, "wal", "0"))

	clock.Advance(2 * time.Hour)
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, report.Deleted, "a may yet commit it")
	assert.Len(t, report.Kept, 1)
	assert.Equal(t, plain, bytesAt(t, mem, mustKey(t, "wal", "0")), "no horizon written over a plain record")

	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 4))
	report, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Len(t, report.Deleted, 1, "below the tenure b's seal began: never committable")
	after, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.False(t, after.Stream, "still a plain record")
}

// TestCollectLeavesNoClockBlob: the blob Collect creates to learn the blob
// store's time is deleted right after. Nothing else deletes a blob of the
// reserved clock space, so a failure of that delete is retried as any
// read is, and a create whose reply was lost is deleted before the error
// is returned: no pass leaves a clock blob behind.
func TestCollectLeavesNoClockBlob(t *testing.T) {
	for name, fault := range map[string]fakestore.Fault{
		"delete fails":      {Op: fakestore.DeleteBlob, Times: 1, Err: errors.New("connection reset")},
		"create reply lost": {Op: fakestore.CreateBlob, Times: 1, Lost: true, Err: errors.New("connection reset")},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			f := &writefence.Fence{Store: mem}
			committedBlob(t, f, "a", 1, "a's segment")
			f = &writefence.Fence{Store: fakestore.New(mem, fakestore.Options{Faults: []fakestore.Fault{fault}})}

			_, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			if fault.Lost {
				require.Error(t, err, "the clock's create is not retried: its reply was lost")
			} else {
				require.NoError(t, err, "the clock's delete is retried")
			}
			_, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			require.NoError(t, err)

			var clocks []string
			for k := range listBlobs(t, mem, "") {
				if strings.Contains(k, "_clock/") {
					clocks = append(clocks, k)
				}
			}
			assert.Empty(t, clocks, "clock blobs left in the reserved space")
		})
	}
}

// TestCollectRecordGoneBelowWhatTheFenceSaw: promise 29 names two ways
// out of a record found absent below what a Fence saw, for every write of
// the Fence and Collect's deletes: an operator's settle above
// (Settlement.Lost) or Forget. Under KeepFloor the shard's floor also
// says the record was lost, not retired. Collect with RecordGone, by
// a Fence that saw the record at epoch 2 and under a floor kept at 1,
// deletes every blob of the shard, the ones the lost record referenced
// included, which Settle (Lost, without DropBlobs) then needs.
func TestCollectRecordGoneBelowWhatTheFenceSaw(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem, KeepFloor: true}
	require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1))
	ref := committedBlob(t, f, "a", 2, "a's committed segment")
	// The record is lost: a lifecycle rule, a TTL, eviction.
	require.NoError(t, mem.Delete(ctx, mustKey(t, "wal", "0")))

	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{RecordGone: true})
	require.ErrorIs(t, err, writefence.ErrEpochRegressed, "the Fence saw epoch 2 and the floor holds 1: the record is lost, not retired")
	assert.Empty(t, report.Deleted)
	_, err = mem.StatBlob(ctx, blobKey(t, ref.Name))
	assert.NoError(t, err, "the blob the lost record referenced is kept")
}

// TestCollectHorizonBoundary: a blob exactly Grace old by the blob
// store's clock is collected and lies behind the horizon Collect raises;
// one a nanosecond younger is kept, at the horizon, and a commit of it
// lands (promises 20, 24 and 26 agree at the boundary).
func TestCollectHorizonBoundary(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	f := &writefence.Fence{Store: mem}
	committedBlob(t, f, "a", 1, "a's committed segment")
	old := putBlob(t, f, "a", 2, "exactly Grace old")
	born := clock.Now()
	clock.Advance(time.Nanosecond)
	young := putBlob(t, f, "a", 2, "a nanosecond younger")
	clock.Set(born.Add(time.Hour)) // the clock's blob is created at this instant

	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1)
	assert.True(t, strings.HasSuffix(report.Deleted[0].Key, old.Name), "the blob exactly Grace old is collected")
	require.Len(t, report.Kept, 1)
	assert.True(t, strings.HasSuffix(report.Kept[0].Key, young.Name), "the younger one is kept")
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, born.Add(time.Nanosecond).UnixNano(), info.Horizon.UnixNano(), "the horizon is the younger blob's creation")

	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(young)), "a blob at the horizon is committable")
	err = f.Commit(ctx, "wal", "0", "a", 3, appendBlob(old))
	require.ErrorIs(t, err, writefence.ErrNotFound, "the collected one is not")
}
