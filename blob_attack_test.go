package writefence_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// blobPutAs writes, straight to s, a blob of data by writer at epoch with
// the id id, and returns its reference.
func blobPutAs(t *testing.T, s writefence.ConditionalStore, writer string, epoch uint64, id, data string) writefence.BlobRef {
	t.Helper()
	name := keys.BlobName(epoch, writer, id)
	n, err := writefence.WriteBlob(t.Context(), s, blobKey(t, name), strings.NewReader(data))
	require.NoError(t, err)
	return writefence.BlobRef{Name: name, Size: n, CRC: crc32.Checksum([]byte(data), crc32.MakeTable(crc32.Castagnoli))}
}

// committer returns a commit of refs, blobs of epoch 1, at a rising epoch
// from 2 (a strict epoch each time: the blobs of a term, committed at
// rising epochs).
func committer(ctx context.Context) func(f *writefence.Fence, writer string, refs ...writefence.BlobRef) error {
	epoch := uint64(1)
	return func(f *writefence.Fence, writer string, refs ...writefence.BlobRef) error {
		epoch++
		return f.Commit(ctx, "wal", "0", writer, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, refs...)
			return m, nil
		})
	}
}

// TestCommitAfterABlobOfAClockAhead: a blob the writer's previous process
// put under a clock an hour ahead sorts after every blob the writer puts
// once restarted with its clock set right, and the listing beside each of
// its commits starts after it. The blobs it did not show sort before where
// it started: the commit lists them from the least, one listing, as it
// would with no listing beside the read, rather than stat each one, and
// lands; a missing one among them is refused.
func TestCommitAfterABlobOfAClockAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := &writefence.MemStore{}
		s := fakestore.New(mem, fakestore.Options{})
		ahead := blobPutAs(t, mem, "a", 1, fmt.Sprintf("%012x%020x", time.Now().Add(time.Hour).UnixMilli(), 1), "put under a clock an hour ahead")
		commit := committer(ctx)
		require.NoError(t, commit(&writefence.Fence{Store: s}, "a", ahead))
		f := &writefence.Fence{Store: s} // the writer, restarted
		first := putBlob(t, f, "a", 1, "the first segment since the restart")
		require.NoError(t, commit(f, "a", first))
		require.Less(t, first.Name, ahead.Name)
		var refs []writefence.BlobRef
		for i := range 16 {
			refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("segment ", i)))
		}
		lists, stats := s.Calls(fakestore.ListBlobsConsistent), s.Calls(fakestore.StatBlob)
		require.NoError(t, commit(f, "a", refs...))
		assert.Equal(t, []int64{2, 0}, []int64{s.Calls(fakestore.ListBlobsConsistent) - lists, s.Calls(fakestore.StatBlob) - stats},
			"listings (beside the read, and from the least new blob), StatBlobs")
		info, err := f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, append([]writefence.BlobRef{ahead, first}, refs...), info.Blobs)

		refs = refs[:0]
		for i := range 4 {
			refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("more ", i)))
		}
		require.NoError(t, mem.DeleteBlob(ctx, blobKey(t, refs[2].Name)))
		err = commit(f, "a", refs...)
		require.ErrorIs(t, err, writefence.ErrNotFound)
		assert.Contains(t, err.Error(), refs[2].Name)
		info, err = f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Len(t, info.Blobs, 18, "no reference to the missing blob landed")
	})
}

// TestCommitUnderATinyListingBudget: with every listing of a commit's
// check cut after one blob, in an epoch where other writers' blobs sort
// among the writer's, each new blob is listed or stat'ed: the commit of
// blobs that exist lands, and one of a blob deleted after its put, or of
// one never put, is refused, whichever of the new blobs it is.
func TestCommitUnderATinyListingBudget(t *testing.T) {
	for _, budget := range []int{1, 2, 3, 1000} {
		for missing := range 6 {
			t.Run(fmt.Sprintf("budget=%d/missing=%d", budget, missing), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := hook.With(t.Context(), &hook.Hooks{ListBudget: budget})
					mem := &writefence.MemStore{}
					s := fakestore.New(mem, fakestore.Options{})
					f := &writefence.Fence{Store: s}
					other := &writefence.Fence{Store: s}
					commit := committer(ctx)
					require.NoError(t, commit(f, "a", putBlob(t, f, "a", 1, "committed")))
					var refs []writefence.BlobRef
					for i := range 5 {
						refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("segment ", i)))
						putBlob(t, other, "b", 1, fmt.Sprint("a deposed writer's ", i))
						time.Sleep(time.Millisecond)
					}
					switch {
					case missing < 5:
						require.NoError(t, mem.DeleteBlob(ctx, blobKey(t, refs[missing].Name)))
					default:
						never := refs[4]
						never.Name = keys.BlobName(1, "a", fmt.Sprintf("%012x%020x", time.Now().Add(time.Hour).UnixMilli(), 7))
						refs = append(refs, never)
					}
					err := commit(f, "a", refs...)
					require.ErrorIs(t, err, writefence.ErrNotFound)
					info, err := f.Inspect(ctx, "wal", "0")
					require.NoError(t, err)
					require.Len(t, info.Blobs, 1, "no reference to a missing blob landed")

					if missing < 5 {
						refs = append(refs[:missing], refs[missing+1:]...)
					} else {
						refs = refs[:5]
					}
					require.NoError(t, commit(f, "a", refs...), "every blob exists")
				})
			})
		}
	}
}

// TestCommitOfTwoFencesInOneMillisecond: two Fences of one writer (a
// process and its restart) put blobs in the same millisecond, each from
// its own random id, so their names interleave in no order the listing
// can rely on; a commit of all of them, by either Fence, lands, and one of
// all but a deleted one is refused.
func TestCommitOfTwoFencesInOneMillisecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := &writefence.MemStore{}
		s := fakestore.New(mem, fakestore.Options{})
		f, g := &writefence.Fence{Store: s}, &writefence.Fence{Store: s}
		commit := committer(ctx)
		require.NoError(t, commit(f, "a", putBlob(t, f, "a", 1, "committed")))
		require.NoError(t, commit(g, "a", putBlob(t, g, "a", 1, "committed by the restart")))
		var refs []writefence.BlobRef
		for i := range 8 {
			refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("f ", i)), putBlob(t, g, "a", 1, fmt.Sprint("g ", i)))
		}
		require.NoError(t, mem.DeleteBlob(ctx, blobKey(t, refs[5].Name)))
		for _, c := range []*writefence.Fence{f, g} {
			err := commit(c, "a", refs...)
			require.ErrorIs(t, err, writefence.ErrNotFound)
		}
		refs = append(refs[:5], refs[6:]...)
		for i, c := range []*writefence.Fence{g, f} {
			require.NoError(t, commit(c, "a", refs[i*7:(i+1)*7+i]...))
		}
		info, err := f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Len(t, info.Blobs, 2+15)
	})
}

// TestCommitOverAStoreThatMisreadsAfter: a store whose listing ignores
// after, or takes it for inclusive, shows more than asked, never less:
// each commit still lands, and one of a deleted blob is refused.
func TestCommitOverAStoreThatMisreadsAfter(t *testing.T) {
	for _, c := range []struct {
		name string
		keep func(key, after string) bool
	}{
		{"ignored", func(string, string) bool { return true }},
		{"inclusive", func(key, after string) bool { return key >= after }},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				mem := &writefence.MemStore{}
				s := fakestore.New(mem, fakestore.Options{ListBlobsConsistent: func(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
					return mem.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error {
						if c.keep(b.Key, after) {
							return fn(b)
						}
						return nil
					})
				}})
				f := &writefence.Fence{Store: s}
				commit := committer(ctx)
				for i := range 3 {
					require.NoError(t, commit(f, "a", putBlob(t, f, "a", 1, fmt.Sprint("committed ", i))))
				}
				a, b := putBlob(t, f, "a", 1, "a"), putBlob(t, f, "a", 1, "b")
				require.NoError(t, mem.DeleteBlob(ctx, blobKey(t, b.Name)))
				require.ErrorIs(t, commit(f, "a", a, b), writefence.ErrNotFound)
				require.NoError(t, commit(f, "a", a))
			})
		})
	}
}

// TestCommitAfterBlobsOfRandomIDs: the blobs a writer put before its ids
// carried the time (32 random hexadecimal digits) sort, most of them,
// after every blob it puts since; over a record that references some, a
// commit of new blobs of their epoch lists those from the least and lands,
// with no StatBlob.
func TestCommitAfterBlobsOfRandomIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := &writefence.MemStore{}
		s := fakestore.New(mem, fakestore.Options{})
		f := &writefence.Fence{Store: s}
		commit := committer(ctx)
		var old []writefence.BlobRef
		for i, id := range []string{"7f0c", "c3a9", "f00d"} {
			old = append(old, blobPutAs(t, mem, "a", 1, id+strings.Repeat("5", 28), fmt.Sprint("an old segment ", i)))
		}
		require.NoError(t, commit(f, "a", old...))
		require.NoError(t, commit(f, "a", putBlob(t, f, "a", 1, "the first with a time")))
		var refs []writefence.BlobRef
		for i := range 8 {
			refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("segment ", i)))
		}
		lists, stats := s.Calls(fakestore.ListBlobsConsistent), s.Calls(fakestore.StatBlob)
		require.NoError(t, commit(f, "a", refs...))
		assert.Equal(t, []int64{2, 0}, []int64{s.Calls(fakestore.ListBlobsConsistent) - lists, s.Calls(fakestore.StatBlob) - stats},
			"listings (beside the read, and from the least new blob), StatBlobs")
	})
}

// TestCommitOwnListingBeforeACollect: a commit by a Fence that remembers
// no record (no listing beside its read) lists its new blobs after its
// read; Collect then raises the horizon and deletes them before the
// commit's write. The write finds the record changed, the check runs
// again, and the commit is refused: no reference to a collected blob
// lands (promise 24).
func TestCommitOwnListingBeforeACollect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		clock := &fakeclock.Clock{}
		mem := &writefence.MemStore{Clock: clock.Now}
		collector := &writefence.Fence{Store: mem}
		var report writefence.GCReport
		var collectErr error
		f, s, armed := listedBefore(t, mem, func() {
			clock.Advance(2 * time.Hour)
			report, collectErr = collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
		})
		require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, func(writefence.Manifest) (writefence.Manifest, error) {
			return writefence.Manifest{Payload: []byte("manifest")}, nil
		}))
		g := &writefence.Fence{Store: s}
		refs := []writefence.BlobRef{putBlob(t, g, "a", 2, "a"), putBlob(t, g, "a", 2, "b")}
		armed.Store(true)
		err := g.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, refs...)
			return m, nil
		})
		require.NoError(t, collectErr)
		assert.Len(t, report.Deleted, 2, "Collect deleted both blobs after the listing")
		require.ErrorIs(t, err, writefence.ErrNotFound)
		assert.EqualValues(t, 2, s.Calls(fakestore.ListBlobsConsistent), "the check's listing, before the Collect and after")
		info, err := collector.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Empty(t, info.Blobs, "no reference to a collected blob landed")
	})
}

// TestStatBlobsOfAnEmptyKey: StatBlobs of two keys under the prefix "",
// one of them "" itself, on a store whose listing is consistent, answers
// as StatBlob of each key does, and does not panic on the least key,
// which has no last byte to drop.
func TestStatBlobsOfAnEmptyKey(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	_, err := writefence.WriteBlob(ctx, mem, "k", strings.NewReader("bytes"))
	require.NoError(t, err)
	want := map[string]writefence.BlobInfo{}
	for _, k := range []string{"", "k"} {
		if info, err := mem.StatBlob(ctx, k); err == nil {
			want[k] = info
		}
	}
	require.Contains(t, want, "k")
	var found map[string]writefence.BlobInfo
	require.NotPanics(t, func() {
		found, err = writefence.StatBlobs(ctx, mem, []string{""}, []string{"", "k"})
	})
	require.NoError(t, err)
	assert.Equal(t, want, found)
}

// TestCommitAfterEscapedKeysOnServers: on MinIO and on fake-gcs-server, a
// writer whose name escapes to '%' and other bytes that travel escaped in
// a listing's start commits blobs, after blobs of a clock ahead and
// before them: every commit lands with no StatBlob of a blob its listings
// could show, and one of a deleted blob is refused.
func TestCommitAfterEscapedKeysOnServers(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(t *testing.T) writefence.ConditionalStore
	}{
		{"minio", func(t *testing.T) writefence.ConditionalStore {
			mc := testserver.S3Server(t).Client(t, nil)
			return writefence.NewMinioStore(mc, testserver.MinioBucket(t, mc))
		}},
		{"gcs", func(t *testing.T) writefence.ConditionalStore {
			gc := testserver.GCSClient(t, testserver.GCSEndpoint(t), nil)
			return writefence.NewGCSStore(gc, testserver.GCSBucket(t, gc))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			inner := c.store(t)
			s := fakestore.New(inner, fakestore.Options{})
			const writer = "a/b c%+é"
			commit := committer(ctx)
			aheadRef := blobPutAs(t, inner, writer, 1, fmt.Sprintf("%012x%020x", time.Now().Add(time.Hour).UnixMilli(), 1), "put under a clock an hour ahead")
			f := &writefence.Fence{Store: s}
			require.NoError(t, commit(f, writer, aheadRef))
			for round := range 3 {
				var refs []writefence.BlobRef
				for i := range 3 {
					refs = append(refs, putBlob(t, f, writer, 1, fmt.Sprint("segment ", round, i)))
				}
				stats := s.Calls(fakestore.StatBlob)
				require.NoError(t, commit(f, writer, refs...), "round %d", round)
				assert.Zero(t, s.Calls(fakestore.StatBlob)-stats, "round %d: StatBlobs", round)
			}
			a, b := putBlob(t, f, writer, 1, "a"), putBlob(t, f, writer, 1, "b")
			require.NoError(t, inner.(writefence.BlobStore).DeleteBlob(ctx, blobKey(t, a.Name)))
			require.ErrorIs(t, commit(f, writer, a, b), writefence.ErrNotFound)
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Len(t, info.Blobs, 10)
		})
	}
}

// TestCommitListedAfterAKeyBeforeACollect: the listing beside a commit's
// read starts after the blob of the epoch the record references and shows
// the new one; Collect then raises the horizon and deletes the new blob
// (the referenced one it keeps). The record is no longer at the version
// the listing began at: the commit checks its blob again and is refused.
func TestCommitListedAfterAKeyBeforeACollect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		clock := &fakeclock.Clock{}
		mem := &writefence.MemStore{Clock: clock.Now}
		collector := &writefence.Fence{Store: mem}
		var report writefence.GCReport
		var collectErr error
		var listedAfter []string
		f, _, armed := listedBefore(t, mem, func() {
			clock.Advance(2 * time.Hour)
			report, collectErr = collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
		})
		inner := f.Store // records where each listing starts
		f.Store = fakestore.New(inner, fakestore.Options{ListBlobsConsistent: func(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
			listedAfter = append(listedAfter, after)
			return inner.(writefence.ConsistentBlobLister).ListBlobsConsistent(ctx, prefix, after, fn)
		}})
		commit := committer(ctx)
		old := putBlob(t, f, "a", 1, "referenced")
		require.NoError(t, commit(f, "a", old))
		time.Sleep(time.Millisecond)
		young := putBlob(t, f, "a", 1, "new")
		armed.Store(true)
		listedAfter = nil
		err := commit(f, "a", young)
		require.NoError(t, collectErr)
		require.Len(t, report.Deleted, 1)
		assert.Equal(t, blobKey(t, young.Name), report.Deleted[0].Key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
		require.NotEmpty(t, listedAfter)
		assert.Equal(t, blobKey(t, old.Name), listedAfter[0], "the listing beside the read started after the referenced blob")
		info, err := collector.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, []writefence.BlobRef{old}, info.Blobs, "no reference to the collected blob landed")
	})
}
