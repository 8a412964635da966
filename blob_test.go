package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
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

// blobCalls returns the calls made so far of the blob store s: create,
// open, stat, list, delete.
func blobCalls(s fakestore.Store) [5]int64 {
	return [5]int64{s.Calls(fakestore.CreateBlob), s.Calls(fakestore.OpenBlob), s.Calls(fakestore.StatBlob),
		s.Calls(fakestore.ListBlobs) + s.Calls(fakestore.ListBlobsConsistent), s.Calls(fakestore.DeleteBlob) + s.Calls(fakestore.DeleteBlobs)}
}

// testCommitManyBlobs: a commit whose manifest newly references 1,000
// blobs, uploaded before it, is one conditional write of the record,
// after one read of it; checking that those blobs exist costs, made
// between the read and the write, one listing of the blobs of their epoch
// on a store that declares a ConsistentBlobLister, else one StatBlob each,
// and nothing else of the blob store. traffic, when not nil, returns the
// requests store sent so far and the writes (PUT and POST) among them: on
// the wire the commit is then the record's read, one listing request (a
// page holds 1,000 blobs on S3 and GCS), and the one write.
func testCommitManyBlobs(t *testing.T, store writefence.ConditionalStore, traffic func() (reqs, writes int64)) {
	const n = 1000
	ctx := t.Context()
	blobs := fakestore.New(store, fakestore.Options{})
	f := &writefence.Fence{Store: store, Blobs: blobs, Prefix: testserver.UniqueName(t) + "/"}
	listing := declares[writefence.ConsistentBlobLister](store)
	first := putBlob(t, f, "a", 1, "the first segment")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, appendBlob(first)))
	refs := make([]writefence.BlobRef, n)
	for i := range refs {
		ref, err := f.PutBlob(ctx, "wal", "0", "a", 2, strings.NewReader(fmt.Sprintf("segment %d", i)))
		require.NoError(t, err)
		refs[i] = ref
	}

	traced, trace := testserver.Traced(ctx)
	calls := blobCalls(blobs)
	var reqs, writes int64
	if traffic != nil {
		reqs, writes = traffic()
	}
	require.NoError(t, f.Commit(traced, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, refs...)
		return m, nil
	}))
	after := blobCalls(blobs)
	assert.Equal(t, int64(1), trace.Writes(), "one conditional write")
	assert.Equal(t, int64(1), trace.Reads(), "one read of the record")
	assert.Zero(t, trace.Waits(), "no retry")
	delta := [5]int64{after[0] - calls[0], after[1] - calls[1], after[2] - calls[2], after[3] - calls[3], after[4] - calls[4]}
	if listing {
		assert.Equal(t, [5]int64{0, 0, 0, 1, 0}, delta, "blob calls (create, open, stat, list, delete): one listing of the blobs of epoch 2")
	} else {
		assert.Equal(t, [5]int64{0, 0, n, 0, 0}, delta, "blob calls (create, open, stat, list, delete): one StatBlob per blob newly referenced")
	}
	if traffic != nil {
		reqsAfter, writesAfter := traffic()
		assert.Equal(t, int64(1), writesAfter-writes, "one write on the wire")
		assert.Equal(t, int64(1+1+1), reqsAfter-reqs, "requests: the record's read, one listing, the write")
		t.Logf("a commit newly referencing %d blobs: %d requests", n, reqsAfter-reqs)
	}

	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, append([]writefence.BlobRef{first}, refs...), info.Blobs)
	assert.Equal(t, uint64(2), info.Epoch)
	got, err := readBlob(t, f, refs[n-1].Name)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("segment %d", n-1), got)
}

// TestCommitManyBlobs: see testCommitManyBlobs, in memory and in a
// directory.
func TestCommitManyBlobs(t *testing.T) {
	t.Parallel()
	t.Run("mem", func(t *testing.T) { testCommitManyBlobs(t, &writefence.MemStore{}, nil) })
	t.Run("dir", func(t *testing.T) { testCommitManyBlobs(t, newDirStore(t, t.TempDir()), nil) })
}

// TestCommitChecksUnlistedBlobs: a commit whose new blobs of one epoch are
// checked by a listing checks each blob the listing did not show with
// StatBlob before it refuses: with a listing that shows nothing, the
// commit of blobs that exist lands, one StatBlob a blob, and the commit
// of one that does not exist is refused with ErrNotFound, writing nothing.
func TestCommitChecksUnlistedBlobs(t *testing.T) {
	ctx := t.Context()
	// A consistent listing that shows none of the blobs that exist: a
	// listing that fell behind, or lost a page.
	s := fakestore.New(&writefence.MemStore{}, fakestore.Options{
		ListBlobsConsistent: func(context.Context, string, func(writefence.BlobInfo) error) error { return nil },
	})
	f := &writefence.Fence{Store: s}
	var refs []writefence.BlobRef
	for i := range 5 {
		refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("segment ", i)))
	}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = refs
		return m, nil
	}), "the blobs exist, though the listing did not show them")
	assert.EqualValues(t, 5, s.Calls(fakestore.StatBlob), "one StatBlob of each blob the listing did not show")

	more := []writefence.BlobRef{putBlob(t, f, "a", 2, "six"), putBlob(t, f, "a", 2, "seven")}
	missing := more[1]
	missing.Name = strings.Replace(missing.Name, missing.Name[17:49], strings.Repeat("0", 32), 1)
	err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, more[0], missing)
		return m, nil
	})
	require.ErrorIs(t, err, writefence.ErrNotFound)
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.Epoch, "the refused commit wrote nothing")
	assert.ElementsMatch(t, refs, info.Blobs)
}

// declares reports whether s declares the capability C as its own.
func declares[C any](s writefence.ConditionalStore) bool {
	c, ok := s.(writefence.Capable)
	_, has := s.(C)
	return ok && has && c.Capabilities() == s
}

// TestCommitInALongEpoch: once the record references more blobs written
// at one epoch than a listing's budget, a commit of a few new blobs of that
// epoch checks them with StatBlob and lists nothing (a listing would run
// over the old blobs and not show the new ones); below that, it lists.
func TestCommitInALongEpoch(t *testing.T) {
	ctx := t.Context()
	s := fakestore.New(&writefence.MemStore{}, fakestore.Options{})
	f := &writefence.Fence{Store: s}
	epoch := uint64(1)
	commit := func(n int) {
		var refs []writefence.BlobRef
		for i := range n {
			refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("segment ", i)))
		}
		epoch++ // the blobs stay those of epoch 1: a term's blobs, committed at rising epochs
		require.NoError(t, f.Commit(ctx, "wal", "0", "a", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, refs...)
			return m, nil
		}))
	}
	commit(990)
	require.EqualValues(t, 1, s.Calls(fakestore.ListBlobsConsistent), "a fresh epoch's blobs: one listing")
	require.Zero(t, s.Calls(fakestore.StatBlob))
	commit(10)
	assert.EqualValues(t, 2, s.Calls(fakestore.ListBlobsConsistent), "1,000 blobs of the epoch, the budget: listed")
	assert.Zero(t, s.Calls(fakestore.StatBlob))
	commit(16)
	assert.EqualValues(t, 2, s.Calls(fakestore.ListBlobsConsistent), "1,016 blobs of the epoch, over the budget: not listed")
	assert.EqualValues(t, 16, s.Calls(fakestore.StatBlob), "one StatBlob a new blob")
}
