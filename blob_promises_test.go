package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
)

// throttled fails the next n calls of op with a throttling error, as a
// loaded server answers 503 (every call when n is 0).
func throttled(op fakestore.Op, n int) fakestore.Fault {
	return fakestore.Fault{Op: op, Times: n, Err: &writefence.StoreError{Op: "test " + op.String(), Err: errors.New("503 slow down")}}
}

// TestCommitRetriesAThrottledStat: a transient failure of one of a
// commit's checks of its blobs is retried like any read (promise 6), not
// the end of the commit.
func TestCommitRetriesAThrottledStat(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	blobs := fakestore.New(mem, fakestore.Options{})
	f := &writefence.Fence{Store: mem, Blobs: blobs, RetryDelay: time.Microsecond}
	ref := putBlob(t, f, "a", 1, "segment")
	blobs.Inject(throttled(fakestore.StatBlob, 1))
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)), "one 503 is retried")
	assert.Equal(t, int64(2), blobs.Calls(fakestore.StatBlob), "the throttled check, then its retry")

	blobs.Inject(throttled(fakestore.StatBlob, 0))
	ref2 := putBlob(t, f, "a", 3, "another")
	err := f.Commit(ctx, "wal", "0", "a", 4, appendBlob(ref2))
	require.Error(t, err, "a store that keeps failing ends the commit after MaxAttempts")
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	assert.Contains(t, err.Error(), "10 attempts")
}

// TestCollectRefusesAShardWithoutRecord: Collect deletes nothing of a
// shard whose record it cannot find (a Fence over another prefix or store
// than its writers', a record lost), unless told the shard was retired on
// purpose; told so while the record exists, it refuses (promise 25).
func TestCollectRefusesAShardWithoutRecord(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	ref := putBlob(t, f, "a", 1, "uncommitted")

	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Nanosecond})
	require.ErrorIs(t, err, writefence.ErrNotFound)
	assert.Empty(t, report.Deleted)
	assert.Contains(t, err.Error(), "1 blobs but no record")
	_, err = mem.StatBlob(ctx, blobKey(t, ref.Name))
	require.NoError(t, err, "the blob is kept")

	_, err = f.Collect(ctx, "wal", "typo", writefence.GCOptions{})
	require.ErrorIs(t, err, writefence.ErrNotFound, "no record and no blob: no such shard")

	report, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{RecordGone: true})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1, "a shard retired on purpose loses its blobs")
	_, err = mem.StatBlob(ctx, blobKey(t, ref.Name))
	require.ErrorIs(t, err, writefence.ErrNotFound)

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, []byte("record")))
	_, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{RecordGone: true})
	require.ErrorIs(t, err, writefence.ErrInvalidArgument, "RecordGone over a record")
}

func blobKey(t testing.TB, name string) string {
	t.Helper()
	k, err := keys.Blob("", "wal", "0", name)
	require.NoError(t, err)
	return k
}

// pausedCommit pushes the shard's record at epoch 1 over mem, puts a
// blob by "a" at blobEpoch, and starts a commit of it at epoch 2 that
// checks the blob and is held once it has sent its write; it returns the
// gate whose Open lets the write go, the writer's Fence, the blob's
// reference and the commit's end.
func pausedCommit(t *testing.T, mem *writefence.MemStore, blobEpoch uint64) (*fakestore.Gate, *writefence.Fence, writefence.BlobRef, <-chan error) {
	t.Helper()
	ctx := t.Context()
	store := fakestore.New(mem, fakestore.Options{})
	writer := &writefence.Fence{Store: store}
	require.NoError(t, writer.Push(ctx, "wal", "0", "a", 1, []byte("manifest")))
	ref := putBlob(t, writer, "a", blobEpoch, "segment")

	gate := &fakestore.Gate{}
	store.Inject(fakestore.Fault{Op: fakestore.Put, Key: mustKey(t, "wal", "0"), Times: 1, Gate: gate})
	done := make(chan error, 1)
	go func() { done <- writer.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)) }()
	<-gate.Arrived() // the commit checked its blob and sent its write
	return gate, writer, ref, done
}

// TestPausedCommitNeverLandsADeletedBlob: a commit that checked its blob,
// then paused before its write for longer than the grace, while Collect
// deleted the blob, is refused: it never lands a reference to a blob that
// is gone (promises 20 and 24). Collect raises the record's collection
// horizon first, so the paused write conflicts, the commit decides again
// and finds the blob gone.
func TestPausedCommitNeverLandsADeletedBlob(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	gate, writer, ref, done := pausedCommit(t, mem, 1)

	clock.Advance(2 * time.Hour)
	collector := &writefence.Fence{Store: mem}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1, "older than the grace and unreferenced: deleted")
	info, err := collector.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.False(t, info.Horizon.IsZero(), "the record carries the collection horizon")

	gate.Open()
	err = <-done
	require.ErrorIs(t, err, writefence.ErrNotFound, "the commit found its blob gone")
	info, err = collector.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Empty(t, info.Blobs, "no reference to a deleted blob landed")
	assert.Equal(t, uint64(1), info.Epoch)

	// A blob created before the horizon is never committed again, even
	// if something put it back: it is garbage.
	_, err = mem.CreateBlob(ctx, blobKey(t, ref.Name), strings.NewReader("segment"))
	require.NoError(t, err)
	clock.Advance(-3 * time.Hour)
	old := putBlob(t, writer, "a", 1, "from before the horizon")
	clock.Advance(3 * time.Hour)
	err = writer.Commit(ctx, "wal", "0", "a", 3, appendBlob(old))
	require.ErrorIs(t, err, writefence.ErrNotFound)
	assert.Contains(t, err.Error(), "before the collection horizon")
}

// TestZombieBlobNeverAdmitted: a previous incarnation of a holder (a
// process the same holder name restarted from, still running) uploads a
// blob at its old term after the new term's seal: no commit admits it,
// not even the new incarnation's own, and Collect deletes it at once
// (promise 21).
func TestZombieBlobNeverAdmitted(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	old := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "wal/0", Holder: "a", TTL: time.Minute, Clock: clock.Now}
	_, err := old.Acquire(ctx)
	require.NoError(t, err)
	oldEpoch, err := old.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, old.Fence.Seal(ctx, "wal", "0", "a", oldEpoch))

	restarted := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "wal/0", Holder: "a", TTL: time.Minute, Clock: clock.Now}
	_, err = restarted.Acquire(ctx)
	var held *writefence.LeaseHeldError
	require.ErrorAs(t, err, &held, "a second value of the holder waits for the term to end")
	clock.Advance(2 * time.Minute)
	_, err = restarted.Hold(ctx, writefence.Shard{Plugin: "wal", Shard: "0"})
	require.NoError(t, err)
	defer restarted.Release(context.WithoutCancel(ctx))

	// The zombie, within its TTL by a clock of its own, uploads at its term.
	zombie := putBlob(t, old.Fence, "a", oldEpoch+1, "the zombie's segment")
	e, err := restarted.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	err = restarted.Fence.Commit(ctx, "wal", "0", "a", e, appendBlob(zombie))
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "before the tenure that began at epoch "+fmt.Sprint(2<<32|1))
	report, err := restarted.Fence.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1, "collected at once, whatever the grace")
	assert.Equal(t, blobKey(t, zombie.Name), report.Deleted[0].Key)
}

// flipAt damages the record of (wal, 0) in mem from outside: the byte at
// index at (from the end when negative) flips.
func flipAt(t *testing.T, mem *writefence.MemStore, at int) {
	t.Helper()
	key := mustKey(t, "wal", "0")
	data, v, err := mem.Get(t.Context(), key)
	require.NoError(t, err)
	if at < 0 {
		at += len(data)
	}
	data[at] ^= 1
	_, err = mem.PutIfVersion(t.Context(), key, data, v)
	require.NoError(t, err)
}

// TestSettleKeepsReferences: a settle over a manifest whose payload is
// damaged keeps the blobs it references, which Inspect shows; Collect
// then keeps them and readers read them (promise 9). Over damaged
// references it refuses unless told to drop them, and then the blobs are
// garbage Collect deletes at once.
func TestSettleKeepsReferences(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("manifest")))
	ref := putBlob(t, f, "a", 1, "acknowledged segment")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))

	flipAt(t, mem, -1) // the payload's last byte: header and references intact
	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs, "the damaged record's references, as they decode")
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "operator", Epoch: 3, Payload: []byte("restored")}))
	info, err = f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs, "the settle kept them")
	assert.Equal(t, uint64(3), info.Since, "a settle begins a tenure at its epoch")
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	assert.Empty(t, report.Deleted)
	data, err := readBlob(t, f, ref.Name)
	require.NoError(t, err)
	assert.Equal(t, "acknowledged segment", data)

	// Damage in the references: they cannot be read.
	key := mustKey(t, "wal", "0")
	raw, _, err := mem.Get(ctx, key)
	require.NoError(t, err)
	flipAt(t, mem, len(raw)-len("restored")-3) // inside the last reference's CRC
	info, err = f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Nil(t, info.Blobs)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "operator", Epoch: 4, Payload: []byte("again")})
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "DropBlobs")
	_, v, err := mem.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, info.Version, v, "refused: nothing written")
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "operator", Epoch: 4, Payload: []byte("again"), DropBlobs: true}))
	report, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1, "dropped: garbage behind the settle's horizon, collected at once")
}
