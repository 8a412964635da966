package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// appendBlob is a commit that adds ref to the manifest, idempotent.
func appendBlob(ref writefence.BlobRef) func(writefence.Manifest) (writefence.Manifest, error) {
	return func(m writefence.Manifest) (writefence.Manifest, error) {
		if !slices.Contains(m.Blobs, ref) {
			m.Blobs = append(m.Blobs, ref)
		}
		return m, nil
	}
}

func putBlob(t *testing.T, f *writefence.Fence, writer string, epoch uint64, data string) writefence.BlobRef {
	t.Helper()
	ref, err := f.PutBlob(t.Context(), "wal", "0", writer, epoch, strings.NewReader(data))
	require.NoError(t, err)
	return ref
}

// committedBlob puts a blob of data by writer at epoch and commits it at
// that epoch, and returns its reference.
func committedBlob(t *testing.T, f *writefence.Fence, writer string, epoch uint64, data string) writefence.BlobRef {
	t.Helper()
	ref := putBlob(t, f, writer, epoch, data)
	require.NoError(t, f.Commit(t.Context(), "wal", "0", writer, epoch, appendBlob(ref)))
	return ref
}

func readBlob(t *testing.T, f *writefence.Fence, name string) (string, error) {
	t.Helper()
	rc, _, err := f.OpenBlob(t.Context(), "wal", "0", name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// TestBlobRoundTrip: a blob is streamed in, committed, listed by the
// manifest, and read back checked against its reference.
func TestBlobRoundTrip(t *testing.T) {
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	ref := putBlob(t, f, "a", 3, "segment one")
	assert.Equal(t, int64(len("segment one")), ref.Size)
	require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 4, appendBlob(ref)))

	got, err := readBlob(t, f, ref.Name)
	require.NoError(t, err)
	assert.Equal(t, "segment one", got)
	info, err := f.Inspect(t.Context(), "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs)
	assert.Equal(t, uint64(4), info.Epoch)
}

// TestCommitChecksNewBlobs: a commit lands only while every blob it newly
// references exists, was written by its writer at an epoch within its
// tenure and not above the commit's, and has the size its reference gives.
func TestCommitChecksNewBlobs(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	ref := putBlob(t, f, "a", 3, "bytes")

	missing := ref
	missing.Name = strings.Replace(ref.Name, ref.Name[17:49], strings.Repeat("0", 32), 1)
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 4, appendBlob(missing)), writefence.ErrNotFound)

	wrongSize := ref
	wrongSize.Size++
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 4, appendBlob(wrongSize)), writefence.ErrInvalidArgument)
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "b", 4, appendBlob(ref)), writefence.ErrInvalidArgument, "another writer's blob")
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)), writefence.ErrInvalidArgument, "a blob above the commit's epoch")
	_, _, _, err := f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound, "refusals write nothing")

	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 4, appendBlob(ref)))
	// b takes over at epoch 5: its tenure starts at 5, above a's epoch 4.
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 5))
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(5), info.Since)
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs, "a seal keeps the references")
	late := putBlob(t, f, "b", 4, "written before b's tenure")
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "b", 6, appendBlob(late)), writefence.ErrInvalidArgument)
	own := putBlob(t, f, "b", 5, "b's own")
	require.NoError(t, f.Commit(ctx, "wal", "0", "b", 6, appendBlob(own)))
}

// TestDeposedWritersBlobs: a writer deposed mid-stream leaves blobs no
// reader ever sees; once its successor sealed, Collect deletes them at
// once, whatever the grace, and never a referenced blob.
func TestDeposedWritersBlobs(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	f := &writefence.Fence{Store: &writefence.MemStore{Clock: clock.Now}}
	a1 := putBlob(t, f, "a", 1, "a's first segment")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(a1)))
	a2 := putBlob(t, f, "a", 3, "a's second segment, never committed")

	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 10))
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 3, appendBlob(a2)), writefence.ErrStaleEpoch)
	_, err := readBlob(t, f, a2.Name)
	require.ErrorIs(t, err, writefence.ErrNotFound, "an uncommitted blob is never visible")

	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1)
	assert.True(t, strings.HasSuffix(report.Deleted[0].Key, a2.Name), "the deposed writer's blob is collected at once")
	require.Len(t, report.Referenced, 1)
	got, err := readBlob(t, f, a1.Name)
	require.NoError(t, err, "the referenced blob stays")
	assert.Equal(t, "a's first segment", got)
}

// TestCollectGrace: an unreferenced blob of the current tenure is kept
// until it is older than the grace by the store's clock; a dry run deletes
// nothing; a referenced blob is never deleted, however old.
func TestCollectGrace(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	f := &writefence.Fence{Store: mem}
	kept := putBlob(t, f, "a", 1, "committed")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(kept)))
	pending := putBlob(t, f, "a", 3, "in flight")

	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, report.Deleted)
	assert.Len(t, report.Kept, 1)

	clock.Advance(2 * time.Hour)
	report, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour, DryRun: true})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1)
	_, err = mem.StatBlob(ctx, report.Deleted[0].Key)
	require.NoError(t, err, "a dry run deletes nothing")

	report, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	require.Len(t, report.Deleted, 1)
	assert.True(t, strings.HasSuffix(report.Deleted[0].Key, pending.Name))
	_, err = readBlob(t, f, kept.Name)
	require.NoError(t, err)
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 4, appendBlob(pending)), writefence.ErrNotFound, "a collected blob cannot be committed")
}

// TestCollectFailsClosed: over a corrupt manifest Collect deletes nothing.
func TestCollectFailsClosed(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	ref := putBlob(t, f, "a", 1, "bytes")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))
	_, v, err := mem.Get(ctx, mustKey(t, "wal", "0"))
	require.NoError(t, err)
	_, err = mem.PutIfVersion(ctx, mustKey(t, "wal", "0"), []byte("garbage"), v)
	require.NoError(t, err)
	_, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Nanosecond})
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	_, err = readBlob(t, &writefence.Fence{Store: mem}, ref.Name)
	require.ErrorIs(t, err, writefence.ErrCorrupt, "the manifest is unreadable")
	n := 0
	require.NoError(t, mem.ListBlobs(ctx, "", func(writefence.BlobInfo) error { n++; return nil }))
	assert.Equal(t, 1, n, "nothing deleted")
}

// TestCollectRefusesAListingOutsideItsShard: a store that lists blobs
// beyond the prefix Collect asked for fails the collection, which deletes
// nothing, rather than having Collect misread another shard's blob.
func TestCollectRefusesAListingOutsideItsShard(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	// ListBlobs lists every blob, whatever the prefix, against the
	// contract of BlobStore.
	f := &writefence.Fence{Store: fakestore.New(mem, fakestore.Options{ListBlobs: func(ctx context.Context, _ string, fn func(writefence.BlobInfo) error) error {
		return mem.ListBlobs(ctx, "", fn)
	}})}
	ref := putBlob(t, f, "a", 1, "shard 0's")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))
	_, err := f.PutBlob(ctx, "wal", "other shard", "b", 1, strings.NewReader("never committed"))
	require.NoError(t, err)
	require.NoError(t, f.Seal(ctx, "wal", "other shard", "c", 5))

	_, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Nanosecond})
	require.ErrorContains(t, err, "outside")
	n := 0
	require.NoError(t, mem.ListBlobs(ctx, "", func(writefence.BlobInfo) error { n++; return nil }))
	assert.Equal(t, 2, n, "nothing deleted")
}

// TestBlobsElsewhere: the manifests in one store, the blobs in another.
func TestBlobsElsewhere(t *testing.T) {
	records, blobs := &writefence.MemStore{}, &writefence.MemStore{}
	f := &writefence.Fence{Store: records, Blobs: blobs}
	ref := putBlob(t, f, "a", 1, "kept elsewhere")
	require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, appendBlob(ref)))
	got, err := readBlob(t, f, ref.Name)
	require.NoError(t, err)
	assert.Equal(t, "kept elsewhere", got)
	n := 0
	require.NoError(t, records.ListBlobs(t.Context(), "", func(writefence.BlobInfo) error { n++; return nil }))
	assert.Zero(t, n)
}

// TestBlobsUnsupported: a store that declares no BlobStore, such as a
// wrapper, holds no blobs.
func TestBlobsUnsupported(t *testing.T) {
	f := &writefence.Fence{Store: counted(&writefence.MemStore{})}
	_, err := f.PutBlob(t.Context(), "wal", "0", "a", 1, strings.NewReader("x"))
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// TestCommitRetryAfterLostReply: an idempotent commit whose reply was lost
// is resolved by the next read, within the call and across calls.
func TestCommitRetryAfterLostReply(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	lost := counted(mem, lostReplies(1))
	ref := putBlob(t, &writefence.Fence{Store: mem}, "a", 1, "x")
	// The fake declares nothing, so blobs live in mem itself.
	f := &writefence.Fence{Store: lost, Blobs: mem}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)), "the same commit again: landed")
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs)
}

// TestPushKeepsTheFloor: once a shard holds a manifest, a push over it
// replaces the payload alone: it keeps the references, so the committed
// blobs stay referenced and Collect keeps them, and it keeps the tenure
// floor rising, through the version cache too.
func TestPushKeepsTheFloor(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	ref := putBlob(t, f, "a", 1, "x")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 5, []byte("plain")))
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs, "the push keeps the references")
	assert.Equal(t, "plain", string(info.Payload))
	assert.Equal(t, uint64(3), info.Since, "b's tenure begins above a's epoch 2")
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 6, []byte("plain again")))
	info, err = f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), info.Since, "the same writer keeps its floor, through the version cache too")
	assert.Equal(t, []writefence.BlobRef{ref}, info.Blobs, "and its references, through the version cache too")

	// Another writer's push, then a collection: the committed blob stays.
	other := &writefence.Fence{Store: f.Store}
	require.NoError(t, other.Push(ctx, "wal", "0", "c", 9, []byte("by another writer")))
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	assert.Empty(t, report.Deleted, "a referenced blob is never collected")
	rc, _, err := f.OpenBlob(ctx, "wal", "0", ref.Name)
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, "x", string(data))

	// A shard that never held a manifest keeps format version 2.
	plain := &writefence.MemStore{}
	g := &writefence.Fence{Store: plain}
	require.NoError(t, g.Push(ctx, "wal", "0", "a", 1, []byte("x")))
	require.NoError(t, g.Push(ctx, "wal", "0", "b", 2, []byte("y")))
	data, _, err = plain.Get(ctx, mustKey(t, "wal", "0"))
	require.NoError(t, err)
	assert.Equal(t, byte(2), data[4])
	assert.True(t, bytes.HasPrefix(data, []byte("WFR\x00")))
}

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
	// The blobs are put by another Fence: the committing one lists no
	// blob space beside its read (it put none), and checks the one new
	// blob with StatBlob.
	putter := &writefence.Fence{Store: mem, Blobs: blobs}
	ref := putBlob(t, putter, "a", 1, "segment")
	blobs.Inject(throttled(fakestore.StatBlob, 1))
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)), "one 503 is retried")
	assert.Equal(t, int64(2), blobs.Calls(fakestore.StatBlob), "the throttled check, then its retry")

	blobs.Inject(throttled(fakestore.StatBlob, 0))
	ref2 := putBlob(t, putter, "a", 3, "another")
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

// pausedCommit commits the shard's record (a stream's, with no blob) at
// epoch 1 over mem, puts a blob by "a" at blobEpoch, and starts a commit of it at epoch 2 that
// checks the blob and is held once it has sent its write; it returns the
// gate whose Open lets the write go, the writer's Fence, the blob's
// reference and the commit's end.
func pausedCommit(t *testing.T, mem *writefence.MemStore, blobEpoch uint64) (*fakestore.Gate, *writefence.Fence, writefence.BlobRef, <-chan error) {
	t.Helper()
	ctx := t.Context()
	store := fakestore.New(mem, fakestore.Options{})
	writer := &writefence.Fence{Store: store}
	// A stream's record, on which Collect raises a horizon.
	require.NoError(t, writer.Commit(ctx, "wal", "0", "a", 1, func(writefence.Manifest) (writefence.Manifest, error) {
		return writefence.Manifest{Payload: []byte("manifest")}, nil
	}))
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

// TestPromise20_CommitChecksAReferenceReplacedInPlace: a commit whose
// manifest function replaces a reference where it stands (compaction:
// m.Blobs[i] = merged, as Go code edits a slice it was handed) newly
// references the replacement, and lands only if that blob exists, with its
// size, was written by the committing writer within its tenure, and after
// the collection horizon (promise 20). Otherwise the recorded manifest
// references a blob that does not exist (promise 24), and OpenBlob of it
// reports damage.
func TestPromise20_CommitChecksAReferenceReplacedInPlace(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		ref  writefence.BlobRef
		want error
	}{
		{"a blob that was never written", writefence.BlobRef{Name: keys.BlobName(2, "a", strings.Repeat("0", 32)), Size: 7, CRC: 1}, writefence.ErrNotFound},
		{"another writer's blob", writefence.BlobRef{Name: keys.BlobName(2, "zombie", strings.Repeat("1", 32)), Size: 7, CRC: 1}, writefence.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			first := committedBlob(t, f, "a", 1, "segment 1")

			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs[0] = tc.ref // replace the one segment where it stands
				return m, nil
			})
			require.ErrorIs(t, err, tc.want, "the replacement is newly referenced and checked")

			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, []writefence.BlobRef{first}, info.Blobs, "the recorded manifest still references only blobs that exist")
			for _, r := range info.Blobs {
				_, err := readBlob(t, f, r.Name)
				assert.NoError(t, err, "every referenced blob exists")
			}
		})
	}
}

// TestPromise22_PushKeepsTheRecordedReferences: a push keeps the
// references of the record it replaces (promise 22), the ones the store
// holds. A writer that builds its manifests in a buffer of its own, hands
// it to Commit and later reuses the buffer for its next manifest has not
// changed the record: the push that follows the commit, which the Fence
// conditions on the version it remembers without reading, must still
// carry the recorded references, not what the buffer holds now.
func TestPromise22_PushKeepsTheRecordedReferences(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	first := putBlob(t, f, "a", 1, "segment 1")
	buf := []writefence.BlobRef{first}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = buf
		return m, nil
	}))

	// The writer starts its next manifest in the same buffer.
	buf[0] = writefence.BlobRef{Name: keys.BlobName(3, "a", strings.Repeat("2", 32)), Size: 1, CRC: 1}

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, []byte("checkpoint")))
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []writefence.BlobRef{first}, info.Blobs, "the push keeps the references the store recorded")
	_, err = readBlob(t, f, info.Blobs[0].Name)
	assert.NoError(t, err, "every referenced blob exists (promise 24)")
}

// TestPausedCommitOverAPlainRecord: as TestPausedCommitNeverLandsADeletedBlob,
// over a record only Push wrote. A plain record carries no horizon, so
// Collect keeps the blob, however old, and the paused commit lands a
// reference to a blob that exists (promises 20 and 24).
func TestPausedCommitOverAPlainRecord(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	store := fakestore.New(mem, fakestore.Options{})
	writer := &writefence.Fence{Store: store}
	require.NoError(t, writer.Push(ctx, "wal", "0", "a", 1, []byte("state")))
	plain := bytesAt(t, mem, mustKey(t, "wal", "0"))
	ref := putBlob(t, writer, "a", 1, "segment")
	gate := &fakestore.Gate{}
	store.Inject(fakestore.Fault{Op: fakestore.Put, Key: mustKey(t, "wal", "0"), Times: 1, Gate: gate})
	done := make(chan error, 1)
	go func() { done <- writer.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)) }()
	<-gate.Arrived()

	clock.Advance(2 * time.Hour)
	report, err := (&writefence.Fence{Store: mem}).Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, report.Deleted, "its writer may yet commit it")
	assert.Equal(t, plain, bytesAt(t, mem, mustKey(t, "wal", "0")), "no horizon over a plain record")

	gate.Open()
	require.NoError(t, <-done)
	_, err = readBlob(t, writer, ref.Name)
	assert.NoError(t, err, "every referenced blob exists")
}

// TestPromise24_CollectOfBlobsWithoutCreationTime: on a blob store that
// gives no creation time (the zero time, as Collect's documentation
// considers: "Collect fails safe for references, not for uploads in
// flight"), a commit that checked its blob and then paused while Collect
// ran must not land a reference to a blob Collect deleted (promises 20 and
// 24). Collect may delete the blob, but then the commit must be refused.
func TestPromise24_CollectOfBlobsWithoutCreationTime(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{Clock: func() time.Time { return time.Time{} }}
	gate, _, _, done := pausedCommit(t, mem, 2)

	collector := &writefence.Fence{Store: mem}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{})
	require.NoError(t, err)
	t.Logf("collect deleted %d blobs", len(report.Deleted))

	gate.Open()
	err = <-done
	info, ierr := collector.Inspect(ctx, "wal", "0")
	require.NoError(t, ierr)
	for _, r := range info.Blobs {
		_, err := readBlob(t, collector, r.Name)
		assert.NoError(t, err, "every blob the recorded manifest references exists")
	}
	if len(report.Deleted) > 0 {
		require.Error(t, err, "the commit of a deleted blob is refused")
	}
}

// TestCommitRefusesRepeatedReference: a manifest whose reference list
// names one blob twice (the same reference repeated, as a "append the
// segment" commit retried over a manifest that already has it produces,
// or one name with another checksum) is refused with ErrInvalidArgument
// and nothing is written: a commit never lands a record the decoder
// refuses, and the shard keeps reading and taking writes as before.
func TestCommitRefusesRepeatedReference(t *testing.T) {
	cases := map[string]func(ref writefence.BlobRef) []writefence.BlobRef{
		"the same reference twice": func(ref writefence.BlobRef) []writefence.BlobRef {
			return []writefence.BlobRef{ref, ref}
		},
		"one name with two checksums": func(ref writefence.BlobRef) []writefence.BlobRef {
			other := ref
			other.CRC ^= 1
			return []writefence.BlobRef{ref, other}
		},
	}
	for name, refs := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			first := committedBlob(t, f, "a", 1, "segment one")
			seg := putBlob(t, f, "a", 2, "segment two")

			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, refs(seg)...)
				return m, nil
			})
			assert.ErrorIs(t, err, writefence.ErrInvalidArgument, "a manifest that names a blob twice is refused")

			_, err = f.Inspect(ctx, "wal", "0")
			assert.NoError(t, err, "the recorded manifest decodes")
			_, err = readBlob(t, f, first.Name)
			assert.NoError(t, err, "the committed blob is still readable")
			_, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			assert.NoError(t, err, "collect")
			assert.NoError(t, f.Seal(ctx, "wal", "0", "b", 3), "a successor can still take over")
		})
	}
}

// TestTenureFloorKeptWhenManifestEmpties: a shard's record stays a stream's
// record (format version 3) once it was one, so a manifest that drops its
// last reference keeps the tenure floor rising, and a blob a deposed
// writer uploads after its successor's seal can never be committed.
//
// Sequence: a commits at epoch 1 a manifest referencing its blob (since
// 0, the shard's first tenure); at epoch 2 a drops its references (by
// Commit, or by a plain Push); b seals at epoch 3; a, deposed but still
// running at epoch 2, uploads a blob after b's seal, and its commit at
// epoch 2 is refused as stale; a later seals at epoch 4 and commits its
// epoch-2 blob at epoch 5. Want: since 3 after b's seal, 4 after a's, and
// the commit refused with ErrInvalidArgument, as in the control subtest
// where a's manifest keeps a blob.
func TestTenureFloorKeptWhenManifestEmpties(t *testing.T) {
	cases := map[string]func(t *testing.T, f *writefence.Fence){
		"a's manifest still references a blob (control)": func(t *testing.T, f *writefence.Fence) {
			a2 := putBlob(t, f, "a", 2, "a's compaction")
			require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("compacted"), Blobs: []writefence.BlobRef{a2}}, nil
			}))
		},
		"a commits a manifest of no blobs": func(t *testing.T, f *writefence.Fence) {
			require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("compacted")}, nil
			}))
		},
		"a pushes over its manifest": func(t *testing.T, f *writefence.Fence) {
			require.NoError(t, f.Push(t.Context(), "wal", "0", "a", 2, []byte("compacted")))
		},
	}
	for name, aStep := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			committedBlob(t, f, "a", 1, "a's first segment")
			aStep(t, f)

			require.NoError(t, f.Seal(ctx, "wal", "0", "b", 3))
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(3), info.Since, "b's tenure begins above a's epoch 2")

			zombie := putBlob(t, f, "a", 2, "uploaded by deposed a after b's seal")
			require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(zombie)), writefence.ErrStaleEpoch)

			require.NoError(t, f.Seal(ctx, "wal", "0", "a", 4))
			info, err = f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(4), info.Since, "a's new tenure begins above b's epoch 3")

			err = f.Commit(ctx, "wal", "0", "a", 5, appendBlob(zombie))
			if !assert.ErrorIs(t, err, writefence.ErrInvalidArgument, "a commits the blob it uploaded, deposed, after b's seal") {
				got, rerr := readBlob(t, f, zombie.Name)
				t.Errorf("a reader following the record reads %q (err %v)", got, rerr)
			}
		})
	}
}

// TestReadFullOfADamagedBlob: OpenBlob's reader checks the blob's checksum
// on the read that brings its last byte, so a caller that reads exactly
// the reference's size (io.ReadFull) gets ErrCorrupt for a damaged blob,
// as one that reads to io.EOF does, never the bytes without an error.
// Here one data byte of a committed blob on a directory store is flipped
// on disk, the file's length unchanged.
func TestReadFullOfADamagedBlob(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	f := &writefence.Fence{Store: newDirStore(t, dir)}
	const data = "a segment whose length is known"
	ref := committedBlob(t, f, "a", 1, data)

	key, err := keys.Blob("", "wal", "0", ref.Name)
	require.NoError(t, err)
	path := blobFile(dir, key)
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	at := 7 + len(key) + 3 // the fourth byte of the data
	file[at] ^= 0x20
	require.NoError(t, os.WriteFile(path, file, 0o600))

	// Read to EOF: the damage is found.
	_, err = readBlob(t, f, ref.Name)
	require.ErrorIs(t, err, writefence.ErrCorrupt, "read to io.EOF")

	// Read exactly the size the reference gives.
	rc, got, err := f.OpenBlob(ctx, "wal", "0", ref.Name)
	require.NoError(t, err)
	defer rc.Close()
	buf := make([]byte, got.Size)
	_, err = io.ReadFull(rc, buf)
	assert.ErrorIs(t, err, writefence.ErrCorrupt, "read of exactly ref.Size bytes")
}

// TestOpenBlobRacingCollectIsNotFound: a blob dropped from the manifest and
// collected between OpenBlob's read of the record and its open of the
// blob is ErrNotFound (OpenBlob reads the manifest again and finds it no
// longer referenced), never ErrCorrupt: nothing is damaged.
//
// Sequence: a commits blob x at epoch 2; b seals at epoch 3, carrying x
// forward, and in the gap (a hook in the blob store's OpenBlob, no sleep)
// commits at epoch 4 a compaction that drops x, and Collect deletes x at
// once (below b's tenure floor).
func TestOpenBlobRacingCollectIsNotFound(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	var beforeOpen func(key string) // set once the blob it waits for is committed
	blobs := fakestore.New(mem, fakestore.Options{Before: func(_ context.Context, c fakestore.Call) error {
		if c.Op == fakestore.OpenBlob && beforeOpen != nil {
			beforeOpen(c.Key)
		}
		return nil
	}})
	a := &writefence.Fence{Store: mem, Blobs: blobs}
	b := &writefence.Fence{Store: mem, Blobs: blobs}
	reader := &writefence.Fence{Store: mem, Blobs: blobs}
	collector := &writefence.Fence{Store: mem, Blobs: blobs}

	x := committedBlob(t, a, "a", 2, "a's segment")
	require.NoError(t, b.Seal(ctx, "wal", "0", "b", 3))

	var once sync.Once
	beforeOpen = func(key string) {
		if !strings.HasSuffix(key, x.Name) {
			return
		}
		once.Do(func() {
			require.NoError(t, b.Commit(ctx, "wal", "0", "b", 4, func(m writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("compacted")}, nil
			}))
			report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
			require.NoError(t, err)
			require.Len(t, report.Deleted, 1, "x is collected at once")
		})
	}
	_, err := readBlob(t, reader, x.Name)
	assert.NotErrorIs(t, err, writefence.ErrCorrupt, "nothing in the store is damaged")
	assert.ErrorIs(t, err, writefence.ErrNotFound, "x is no longer referenced")
}

// TestCollectOverAPlainRecordAgreesWithCommit: over a plain record (format
// version 2, which carries no tenure floor of its own) Commit and Collect
// apply the same floor, the record's epoch, so a blob Collect judges never
// committable is refused by a commit that races it.
//
// Sequence: b uploads a blob at epoch 1; a pushes at epoch 3 (a plain
// record); Collect reads the record and judges b's blob never committable
// (another writer's, at an epoch not above 3); between that read and the
// delete (a hook in the blob store's DeleteBlob, no sleep), b seals at 4
// and tries to commit its epoch-1 blob at 5. Want: the commit refused
// (ErrInvalidArgument: before the tenure that began at 4), the blob
// deleted, and the manifest referencing no missing blob.
func TestCollectOverAPlainRecordAgreesWithCommit(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	var beforeDelete func(key string) // set once the blob it waits for exists
	blobs := fakestore.New(mem, fakestore.Options{Before: func(_ context.Context, c fakestore.Call) error {
		if c.Op == fakestore.DeleteBlobs && beforeDelete != nil {
			for _, k := range c.Keys {
				beforeDelete(k)
			}
		}
		return nil
	}})
	collector := &writefence.Fence{Store: mem, Blobs: blobs}
	a := &writefence.Fence{Store: mem, Blobs: blobs}
	b := &writefence.Fence{Store: mem, Blobs: blobs}

	early := putBlob(t, b, "b", 1, "b's segment of epoch 1")
	require.NoError(t, a.Push(ctx, "wal", "0", "a", 3, []byte("a's state")))

	var once sync.Once
	raced := false
	var commitErr error
	beforeDelete = func(key string) {
		if !strings.HasSuffix(key, early.Name) {
			return
		}
		once.Do(func() {
			// b, at admissible epochs, between Collect's read of the
			// record and its delete.
			require.NoError(t, b.Seal(ctx, "wal", "0", "b", 4))
			commitErr = b.Commit(ctx, "wal", "0", "b", 5, appendBlob(early))
			raced = true
		})
	}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	require.True(t, raced, "the commit ran between Collect's read and its delete")
	require.ErrorIs(t, commitErr, writefence.ErrInvalidArgument, "b's epoch-1 blob is below the tenure b began at 4")

	info, err := collector.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.NotContains(t, info.Blobs, early, "the recorded manifest does not reference b's epoch-1 blob")
	deleted := false
	for _, d := range report.Deleted {
		deleted = deleted || strings.HasSuffix(d.Key, early.Name)
	}
	assert.True(t, deleted, "Collect deleted b's epoch-1 blob")
	_, err = readBlob(t, collector, early.Name)
	assert.ErrorIs(t, err, writefence.ErrNotFound, "a blob no manifest references is not readable")
}

// TestCollectPastAnUnnameableBlobFile: on a directory store, a blob file
// whose header is damaged (cut to 5 bytes), which the store cannot name,
// stops no collection: Collect of another shard deletes what it can name
// and judge (a deposed writer's blob, below the successor's tenure) and
// then reports the damage; the damaged file, which it cannot name, it
// leaves alone.
func TestCollectPastAnUnnameableBlobFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	store := newDirStore(t, dir)
	f := &writefence.Fence{Store: store}

	committedBlob(t, f, "a", 1, "a's committed segment")
	doomed := putBlob(t, f, "a", 1, "a's uncommitted segment")
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 2))

	other, err := f.PutBlob(ctx, "wal", "1", "c", 1, strings.NewReader("another shard's blob"))
	require.NoError(t, err)
	otherKey, err := keys.Blob("", "wal", "1", other.Name)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(blobFile(dir, otherKey), 5))

	report, cerr := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	doomedKey, kerr := keys.Blob("", "wal", "0", doomed.Name)
	require.NoError(t, kerr)
	_, serr := store.StatBlob(ctx, doomedKey)
	assert.ErrorIs(t, serr, writefence.ErrNotFound, "a's uncommitted blob, below b's tenure, is collected (%d deleted; collect: %v)", len(report.Deleted), cerr)
}

// What the tests of the blob stores share, on the servers and the
// directory: blobs of a pattern, and the memory a blob's stream takes.

// patternReader yields n bytes of a pattern of its seed, copied as they
// are read from one table the package holds: a blob of any size costs the
// test no memory, and little time.
type patternReader struct {
	n, off int64
	seed   byte
}

// patternPeriod is the period of the pattern, a prime, so that no part
// size repeats it.
const patternPeriod = 65521

// patternTable holds two periods, so that a read of up to one period
// from any offset is one copy.
var patternTable = func() []byte {
	t := make([]byte, 2*patternPeriod)
	for i := range t {
		o := i % patternPeriod
		t[i] = byte(o*31 + o>>7)
	}
	return t
}()

func newPattern(n int64, seed byte) *patternReader { return &patternReader{n: n, seed: seed} }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	total := 0
	for len(p) > 0 && r.off < r.n {
		start := (r.off + int64(r.seed)*977) % patternPeriod
		n := copy(p[:min(int64(len(p)), r.n-r.off)], patternTable[start:start+patternPeriod])
		p = p[n:]
		r.off += int64(n)
		total += n
	}
	return total, nil
}

// patternSum returns the CRC-32C of the pattern of n bytes of seed.
func patternSum(n int64, seed byte) uint32 {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	_, _ = io.Copy(h, newPattern(n, seed))
	return h.Sum32()
}

// readBlobSum reads the blob at key through store to its end and returns
// its size and CRC-32C, and the info OpenBlob gave.
func readBlobSum(t *testing.T, store writefence.BlobStore, key string) (int64, uint32, writefence.BlobInfo) {
	t.Helper()
	rc, info, err := store.OpenBlob(t.Context(), key)
	require.NoError(t, err)
	defer rc.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	n, err := io.Copy(h, rc)
	require.NoError(t, err)
	return n, h.Sum32(), info
}

// listBlobs returns what ListBlobs gives under prefix, by key, failing the
// test if a key comes twice.
func listBlobs(t *testing.T, store writefence.BlobStore, prefix string) map[string]writefence.BlobInfo {
	t.Helper()
	got := map[string]writefence.BlobInfo{}
	require.NoError(t, store.ListBlobs(t.Context(), prefix, func(b writefence.BlobInfo) error {
		_, dup := got[b.Key]
		assert.False(t, dup, "%s listed twice", b.Key)
		got[b.Key] = b
		return nil
	}))
	return got
}

// heapSample is what the heap holds: its objects, live or not yet swept
// (what a peak of memory is made of), and the objects the last GC found
// live (what is retained).
type heapSample struct{ objects, live uint64 }

// readHeap returns the heap's sample, without stopping the world.
func readHeap() heapSample {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return heapSample{objects: s[0].Value.Uint64(), live: s[1].Value.Uint64()}
}

// heapPeak samples the heap every millisecond until stop is called, which
// returns the largest of each figure sampled.
func heapPeak() (stop func() heapSample) {
	done := make(chan struct{})
	result := make(chan heapSample)
	go func() {
		var peak heapSample
		take := func() {
			h := readHeap()
			peak = heapSample{objects: max(peak.objects, h.objects), live: max(peak.live, h.live)}
		}
		take()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				take()
				result <- peak
				return
			case <-tick.C:
				take()
			}
		}
	}()
	return func() heapSample {
		close(done)
		return <-result
	}
}

// growth returns how much each figure of peak exceeds base, in MiB.
func (peak heapSample) growth(base heapSample) (objects, live float64) {
	grew := func(p, b uint64) float64 { return float64(p-min(p, b)) / (1 << 20) }
	return grew(peak.objects, base.objects), grew(peak.live, base.live)
}

// testBlobMemory streams a 40 MiB blob through store's CreateBlob and
// checks that the bytes allocated meanwhile, by every goroutine (an upper
// bound on how much the heap can have grown), stay within bound. It logs
// them and the peak growth of the heap, sampled.
func testBlobMemory(t *testing.T, store writefence.BlobStore, bound uint64) {
	const size = 40 << 20
	key := testserver.UniqueName(t) + "/big"
	// A first blob warms the client up (connections, caches), so what is
	// measured is the blob's own cost.
	_, err := store.CreateBlob(t.Context(), key+"-warm", strings.NewReader("warm"))
	require.NoError(t, err)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := readHeap()
	stop := heapPeak()
	info, err := store.CreateBlob(t.Context(), key, newPattern(size, 9))
	objects, live := stop().growth(base)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, int64(size), info.Size)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB blob: %.1f MiB allocated (bound %.1f MiB); at their peaks the heap's objects grew by %.1f MiB, those live at a GC by %.1f MiB",
		size>>20, float64(allocated)/(1<<20), float64(bound)/(1<<20), objects, live)
	assert.LessOrEqual(t, allocated, bound, "bytes allocated while streaming the blob")

	n, sum, _ := readBlobSum(t, store, key)
	assert.Equal(t, int64(size), n)
	assert.Equal(t, patternSum(size, 9), sum)
}

// blobNames returns the names, in the shard's blob space, of infos.
func blobNames(infos []writefence.BlobInfo) []string {
	var names []string
	for _, b := range infos {
		names = append(names, b.Key[strings.LastIndexByte(b.Key, '/')+1:])
	}
	slices.Sort(names)
	return names
}

// sortedNames returns the names of refs, sorted.
func sortedNames(refs ...writefence.BlobRef) []string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// TestCollectHorizonHeldToTheFloor (promise 31): under KeepFloor, the
// write of a collection's horizon lands only on a record at or above the
// shard's floor, however little the collecting Fence remembers of the
// record by then. Here it forgets (Forget; a Fence past its 131,072
// remembered shards drops one just as well) between its read of the
// record and that write, while the record is set back below the floor.
func TestCollectHorizonHeldToTheFloor(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	key := mustKey(t, "wal", "0")
	w := &writefence.Fence{Store: mem, KeepFloor: true}
	require.NoError(t, w.Seal(ctx, "wal", "0", "a", 1))
	// A stream's record: only one carries a collection horizon.
	require.NoError(t, w.Commit(ctx, "wal", "0", "a", 2, func(writefence.Manifest) (writefence.Manifest, error) {
		return writefence.Manifest{Payload: []byte("a's")}, nil
	}))
	deposed := bytesAt(t, mem, key)
	require.NoError(t, w.Seal(ctx, "wal", "0", "b", 3)) // the floor: 3
	putBlob(t, w, "b", 3, "pending")                    // b's, unreferenced, so aged: the horizon rises over it
	clock.Advance(2 * time.Hour)

	var gc *writefence.Fence
	store := onFirstListing(mem, func() {
		assert.NoError(t, gc.Forget("wal", "0"))
		setBack(t, mem, key, deposed)
	})
	gc = &writefence.Fence{Store: store, KeepFloor: true}
	report, err := gc.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.ErrorIs(t, err, writefence.ErrEpochRegressed)
	assert.Empty(t, report.Deleted)
	assert.Equal(t, deposed, bytesAt(t, mem, key), "no write lands on the record set back below the floor")
}

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
// read is, and a create whose reply was lost is deleted before the create
// is tried again: no pass leaves a clock blob behind.
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
			require.NoError(t, err, "the clock's create and delete are retried")
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

	// A Fence that never saw the shard, without KeepFloor (an operator's
	// gc), reads the floor all the same.
	gc := &writefence.Fence{Store: mem}
	_, err = gc.Collect(ctx, "wal", "0", writefence.GCOptions{RecordGone: true})
	require.ErrorIs(t, err, writefence.ErrEpochRegressed, "a floor kept: the record is lost, not retired")
	_, err = mem.StatBlob(ctx, blobKey(t, ref.Name))
	require.NoError(t, err)

	// Retired on purpose: the floor deleted too.
	floorKey, err := keys.Floor("", "wal", "0")
	require.NoError(t, err)
	require.NoError(t, mem.Delete(ctx, floorKey))
	report, err = gc.Collect(ctx, "wal", "0", writefence.GCOptions{RecordGone: true})
	require.NoError(t, err)
	assert.Len(t, report.Deleted, 1)
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

// TestCollectOverARecordMadePlainMeanwhile: Collect reads a stream's
// record (a's, epoch 1) and judges two blobs by it: x's, at epoch 1,
// never committable (another writer's, not above the record's epoch),
// and a's own, at epoch 2, older than the grace. Between that read and
// the horizon's write the record is deleted from outside and a Fence that
// never saw it pushes b's plain record at epoch 3: no regression for the
// collecting Fence (promise 29: the record is above the epoch it saw).
// The horizon's write finds a plain record, which carries none, so a's
// blob is kept and nothing relies on a horizon. x's blob is still never
// committable (b's tenure began at 3), and Collect deletes it (promise
// 26) and returns nil. It must not refuse with ErrEpochRegressed, as if
// the record had gone back below a horizon it never wrote.
func TestCollectOverARecordMadePlainMeanwhile(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	key := mustKey(t, "wal", "0")
	w := &writefence.Fence{Store: mem}
	committedBlob(t, w, "a", 1, "a's committed segment")
	deposed := putBlob(t, w, "x", 1, "x's segment, never committable")
	pending := putBlob(t, w, "a", 2, "a's upload, older than the grace")
	clock.Advance(2 * time.Hour)

	store := onFirstListing(mem, func() {
		assert.NoError(t, mem.Delete(ctx, key))
		assert.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "b", 3, []byte("b's state")))
	})
	report, err := (&writefence.Fence{Store: store}).Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err, "the record is above what the Fence saw, and no horizon was written")
	assert.Equal(t, []string{deposed.Name}, blobNames(report.Deleted), "x's blob is never committable")
	assert.Contains(t, blobNames(report.Kept), pending.Name, "no horizon over a plain record: a's blob is kept")
	info, err := w.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.False(t, info.Stream, "b's record stays plain")
}

// TestCollectOverAPlainRecordCommittedMeanwhile: Collect reads a plain
// record (a's push at epoch 1) and lists a's two uploads at epoch 2, both
// older than the grace; between that read and the listing, a commits one
// of them at 2, which makes the record a stream's. Judged by the plain
// record, neither aged blob goes and no horizon is written: the committed
// one stays readable (promise 24), and so does the other, which a may
// still commit. The next pass reads the stream's record, raises its
// horizon over the uncommitted blob and deletes it; a commit of it is
// then refused (promise 20).
func TestCollectOverAPlainRecordCommittedMeanwhile(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	mem := &writefence.MemStore{Clock: clock.Now}
	w := &writefence.Fence{Store: mem}
	require.NoError(t, w.Push(ctx, "wal", "0", "a", 1, []byte("a's state")))
	committed := putBlob(t, w, "a", 2, "a's upload, committed during the pass")
	pending := putBlob(t, w, "a", 2, "a's upload, never committed")
	clock.Advance(2 * time.Hour)

	store := onFirstListing(mem, func() {
		assert.NoError(t, w.Commit(ctx, "wal", "0", "a", 2, appendBlob(committed)), "no horizon over the plain record")
	})
	collector := &writefence.Fence{Store: store}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, report.Deleted, "judged by a plain record, no aged blob goes")
	assert.Equal(t, sortedNames(committed, pending), blobNames(report.Kept))
	info, err := w.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.True(t, info.Stream, "the commit's record")
	assert.Zero(t, info.Horizon, "no horizon written")
	got, err := readBlob(t, w, committed.Name)
	require.NoError(t, err, "every referenced blob exists")
	assert.Equal(t, "a's upload, committed during the pass", got)

	report, err = collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, []string{pending.Name}, blobNames(report.Deleted), "over the stream's record the aged blob goes")
	assert.Equal(t, []string{committed.Name}, blobNames(report.Referenced))
	err = w.Commit(ctx, "wal", "0", "a", 3, appendBlob(pending))
	require.ErrorIs(t, err, writefence.ErrNotFound, "behind the horizon")
}

// onFirstListing returns mem behind a store that runs fn once, right
// before the first listing of blobs reaches mem: in a Collect, between its
// read of the record and its listing.
func onFirstListing(mem writefence.ConditionalStore, fn func()) fakestore.Store {
	var once sync.Once
	return fakestore.New(mem, fakestore.Options{Before: func(_ context.Context, c fakestore.Call) error {
		if c.Op == fakestore.ListBlobs {
			once.Do(fn)
		}
		return nil
	}})
}

// TestPutBlobTwoFencesAtOneInstant: two Fences that put a blob of one
// writer at one epoch at one instant (a zombie and its successor on one
// clock) write two keys, never one twice (promise 19): a blob's id is not
// its time alone.
func TestPutBlobTwoFencesAtOneInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := &writefence.MemStore{}
		var names []string
		for range 2 {
			f := &writefence.Fence{Store: mem}
			ref, err := f.PutBlob(t.Context(), "wal", "0", "w1", 1, strings.NewReader("segment"))
			require.NoError(t, err)
			names = append(names, ref.Name)
		}
		require.NotEqual(t, names[0], names[1])
	})
}

// TestOpenBlobChecksBytes: a blob damaged in the store, or of another size
// than its reference, is never read as good bytes: the read ends with
// writefence.ErrCorrupt.
func TestOpenBlobChecksBytes(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}
	ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader("the segment's bytes"))
	require.NoError(t, err)
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, ref)
		return m, nil
	}))
	damage := func(edit func([]byte) []byte) { writefence.DamageMemBlob(mem, ref.Name, edit) }
	read := func() ([]byte, error) {
		rc, _, err := f.OpenBlob(ctx, "wal", "0", ref.Name)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}

	damage(func(b []byte) []byte { b[3] ^= 1; return b })
	_, err = read()
	require.ErrorIs(t, err, writefence.ErrCorrupt, "a flipped byte")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "blob checksum", ce.Check)

	damage(func(b []byte) []byte { b[3] ^= 1; return b[:len(b)-1] })
	_, err = read()
	require.ErrorIs(t, err, writefence.ErrCorrupt, "a blob of another size is refused before a byte is read")

	damage(func([]byte) []byte { return []byte("the segment's bytes") })
	got, err := read()
	require.NoError(t, err, "the bytes are the reference's again")
	assert.Equal(t, "the segment's bytes", string(got))
}

// TestPromise3_PutBlobNilReader: bad input gets a clear typed error and
// nothing is written (promise 3: an invalid argument leaves the store as
// it was), as a nil EpochSource, a nil next or a nil Term does. A nil
// reader (an untyped nil, or a typed nil pointer) is one: PutBlob must
// refuse it with ErrInvalidArgument, not panic inside the store's create.
func TestPromise3_PutBlobNilReader(t *testing.T) {
	var typedNil *nilReader
	for name, r := range map[string]io.Reader{"nil": nil, "typed nil": typedNil} {
		mem := &writefence.MemStore{}
		f := &writefence.Fence{Store: mem}
		var err error
		require.NotPanics(t, func() {
			_, err = f.PutBlob(context.Background(), "wal", "0", "w", 1, r)
		}, name)
		assert.ErrorIs(t, err, writefence.ErrInvalidArgument, name)
		left := 0
		require.NoError(t, mem.ListBlobs(context.Background(), "", func(writefence.BlobInfo) error { left++; return nil }))
		assert.Zero(t, left, "%s: a refused PutBlob wrote a blob", name)
	}
}

type nilReader struct{ data []byte }

func (r *nilReader) Read(p []byte) (int, error) { return copy(p, r.data), io.EOF }

// TestPromise5_PutBlobLostReplyIsOutcomeUnknown: an outcome that cannot
// be learned is an error matching ErrOutcomeUnknown and the cause that hid
// it (promise 5), as PutBlob itself says when the store holds fewer bytes
// than it wrote. A blob create whose reply was lost after the store took
// it leaves the blob written, and PutBlob returns the network error
// alone: the caller cannot tell a blob that may exist from one that
// surely does not.
func TestPromise5_PutBlobLostReplyIsOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	s := fakestore.New(mem, fakestore.Options{Faults: []fakestore.Fault{{Op: fakestore.CreateBlob, Times: 1, Lost: true, Err: fakestore.ErrLostReply}}})
	f := &writefence.Fence{Store: s}
	_, err := f.PutBlob(ctx, "wal", "0", "w", 1, strings.NewReader("segment"))
	require.ErrorIs(t, err, fakestore.ErrLostReply)
	written := 0
	require.NoError(t, mem.ListBlobs(ctx, "", func(writefence.BlobInfo) error { written++; return nil }))
	require.Equal(t, 1, written, "the store took the blob")
	assert.ErrorIs(t, err, writefence.ErrOutcomeUnknown, "a blob whose create's reply was lost")
}

// TestPromise10_CollectDeletesNothingOnceRebranded: under
// BrandVerifyAlways no write lands while the store's brand holds another
// identity, checked "right before it" on a store that cannot check it
// inside the write (promise 10), and Collect counts its deletes among
// its writes. Collect reads the brand once, before its clock's blob, then
// reads the record and lists the blobs; a brand that changes meanwhile
// (here: during the listing) is never read again, and every delete
// lands over a store branded by another program.
func TestPromise10_CollectDeletesNothingOnceRebranded(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	w := &writefence.Fence{Store: mem}
	ok, err := w.ClaimBrand(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	// Writer a's blobs, deposed by b's seal: garbage at once.
	for _, data := range []string{"one", "two", "three"} {
		putBlob(t, w, "a", 1, data)
	}
	require.NoError(t, w.Seal(ctx, "wal", "0", "b", 2))

	var once sync.Once
	rebranded := false
	s := fakestore.New(mem, fakestore.Options{Before: func(ctx context.Context, c fakestore.Call) error {
		if c.Op == fakestore.ListBlobs {
			once.Do(func() {
				_, version, err := mem.Get(ctx, brandKey)
				require.NoError(t, err)
				_, err = mem.PutIfVersion(ctx, brandKey, []byte("theirs/v3"), version)
				require.NoError(t, err)
				rebranded = true
			})
		}
		return nil
	}})
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerifyAlways}
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{})
	require.True(t, rebranded, "the listing ran")
	assert.ErrorIs(t, err, writefence.ErrWire, "the store holds another program's brand")
	assert.Empty(t, report.Deleted, "deleted while the brand held another identity")
	left := 0
	require.NoError(t, mem.ListBlobs(ctx, "writefence/b/wal/0/", func(writefence.BlobInfo) error { left++; return nil }))
	assert.Equal(t, 3, left, "blobs deleted over a store branded by another program")
}

// failingReader yields some bytes, then fails with err.
type failingReader struct {
	sent bool
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		return copy(p, "partial"), nil
	}
	return 0, r.err
}

// TestPromise5_PutBlobOfAFailingReader: a PutBlob whose own reader fails
// leaves no blob (BlobStore's contract): its outcome is known, and it is
// no ErrOutcomeUnknown, to the caller or the Observer.
func TestPromise5_PutBlobOfAFailingReader(t *testing.T) {
	ctx := t.Context()
	obs := &outcomeCounter{}
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem, Observer: obs.observe}
	bad := errors.New("the source file went away")
	_, err := f.PutBlob(ctx, "wal", "0", "a", 1, &failingReader{err: bad})
	require.ErrorIs(t, err, bad)
	assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	var n int
	require.NoError(t, mem.ListBlobs(ctx, "", func(writefence.BlobInfo) error { n++; return nil }))
	assert.Zero(t, n, "no blob was left")
	assert.Equal(t, "failed", eventOutcome(obs.last()))
}

// TestPromise27_RefusedCollectIsSeen: a Collect refused by the brand
// before its first write is seen refused once, as a Push or a PutBlob
// refused so is (WriteEvent: Attempt 0).
func TestPromise27_RefusedCollectIsSeen(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	committedBlob(t, &writefence.Fence{Store: mem}, "a", 1, "segment")
	_, err := (&writefence.Fence{Store: mem, Identity: "other/v1"}).ClaimBrand(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		op   string
		call func(f *writefence.Fence) error
	}{
		{"push", func(f *writefence.Fence) error { return f.Push(ctx, "wal", "0", "a", 2, []byte("x")) }},
		{"blob", func(f *writefence.Fence) error {
			_, err := f.PutBlob(ctx, "wal", "0", "a", 2, strings.NewReader("x"))
			return err
		}},
		{"collect", func(f *writefence.Fence) error {
			_, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{})
			return err
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			obs := &outcomeCounter{}
			f := &writefence.Fence{Store: mem, Brand: writefence.BrandVerifyAlways, Observer: obs.observe}
			require.ErrorIs(t, tc.call(f), writefence.ErrWire)
			require.Len(t, obs.events, 1, "the refused %s is seen once", tc.op)
			assert.Equal(t, tc.op, obs.events[0].Op)
			if tc.op == "collect" {
				assert.Zero(t, obs.events[0].Attempt, "refused before its first write")
			}
			assert.ErrorIs(t, obs.events[0].Err, writefence.ErrWire)
		})
	}
}

// TestPromise25_DryRunDeletesNothing: a dry run deletes none of the
// shard's blobs, and reports over a directory store opened read-only,
// where it cannot write the blob that tells it the store's time.
func TestPromise25_DryRunDeletesNothing(t *testing.T) {
	ctx := t.Context()
	t.Run("a read-only directory store", func(t *testing.T) {
		dir := t.TempDir()
		store, err := writefence.NewDirConditionalStore(dir, nil)
		require.NoError(t, err)
		w := &writefence.Fence{Store: store}
		committedBlob(t, w, "a", 1, "segment")
		zombie := putBlob(t, w, "old", 1, "a deposed writer's segment")
		require.NoError(t, w.Seal(ctx, "wal", "0", "b", 2))
		ro, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{ReadOnly: true})
		require.NoError(t, err)
		report, err := (&writefence.Fence{Store: ro}).Collect(ctx, "wal", "0", writefence.GCOptions{DryRun: true})
		require.NoError(t, err)
		require.Len(t, report.Deleted, 1)
		assert.Equal(t, blobKey(t, zombie.Name), report.Deleted[0].Key, "it reports what it would delete")
	})
}

// TestPromise19_CommitKeepsARecordedReference: a commit that references a
// blob the record references, with another checksum or size, is refused
// with ErrInvalidArgument, nothing written: a blob's reference is written
// once, as the blob is.
func TestPromise19_CommitKeepsARecordedReference(t *testing.T) {
	ctx := t.Context()
	for name, change := range map[string]func(*writefence.BlobRef){
		"checksum": func(r *writefence.BlobRef) { r.CRC ^= 1 },
		"size":     func(r *writefence.BlobRef) { r.Size-- },
	} {
		t.Run(name, func(t *testing.T) {
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			first := committedBlob(t, f, "a", 1, "segment 1")
			before, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			err = f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				change(&m.Blobs[0])
				return m, nil
			})
			require.ErrorIs(t, err, writefence.ErrInvalidArgument)
			after, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, before.Version, after.Version, "nothing written")
			assert.Equal(t, []writefence.BlobRef{first}, after.Blobs)
		})
	}
}

// unexpectedAsEOF passes on r, its io.ErrUnexpectedEOF as io.EOF.
type unexpectedAsEOF struct{ r io.Reader }

func (u unexpectedAsEOF) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// eofBlobs is a MemStore whose CreateBlob takes its reader's
// io.ErrUnexpectedEOF for the blob's end, as a caller of io.ReadFull may:
// a store that breaks BlobStore's contract.
type eofBlobs struct{ *writefence.MemStore }

func (s eofBlobs) Capabilities() writefence.ConditionalStore { return s }

func (s eofBlobs) CreateBlob(ctx context.Context, key string, r io.Reader) (writefence.BlobInfo, error) {
	return s.MemStore.CreateBlob(ctx, key, unexpectedAsEOF{r})
}

// TestPutBlobOfAReaderCutShort: a reader that fails with
// io.ErrUnexpectedEOF (a truncated gzip stream) fails PutBlob, with an
// error matching it, even over a store that took the failure for the
// blob's end: PutBlob returns no reference, and deletes what the store
// kept.
func TestPutBlobOfAReaderCutShort(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: eofBlobs{mem}}
	cut := io.MultiReader(strings.NewReader("the first half"), &failingReader{sent: true, err: io.ErrUnexpectedEOF})
	ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, cut)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "PutBlob returned %+v", ref)
	assert.Zero(t, ref)
	var n int
	require.NoError(t, mem.ListBlobs(ctx, "", func(writefence.BlobInfo) error { n++; return nil }))
	assert.Zero(t, n, "the blob cut short was deleted")
}

// TestPromise27_CollectWithoutBlobsIsSeen: a Collect over a store that
// holds no blobs ends refused (errors.ErrUnsupported), seen once.
func TestPromise27_CollectWithoutBlobsIsSeen(t *testing.T) {
	obs := &outcomeCounter{}
	f := &writefence.Fence{Store: struct{ writefence.ConditionalStore }{&writefence.MemStore{}}, Observer: obs.observe}
	_, err := f.Collect(t.Context(), "wal", "0", writefence.GCOptions{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.Len(t, obs.events, 1)
	assert.Equal(t, "collect", obs.events[0].Op)
	assert.ErrorIs(t, obs.events[0].Err, errors.ErrUnsupported)
}
