package writefence_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// blobCalls returns the calls made so far of the blob store s: create,
// open, stat, list, delete.
func blobCalls(s fakestore.Store) [5]int64 {
	return [5]int64{s.Calls(fakestore.CreateBlob), s.Calls(fakestore.OpenBlob), s.Calls(fakestore.StatBlob),
		s.Calls(fakestore.ListBlobs) + s.Calls(fakestore.ListBlobsConsistent), s.Calls(fakestore.DeleteBlob) + s.Calls(fakestore.DeleteBlobs)}
}

// testCommitManyBlobs: a commit whose manifest newly references 1,000
// blobs, uploaded before it, over the record its Fence wrote last, is one
// conditional write of the record, with no read of it; checking that
// those blobs exist costs, before the write, one listing of the blobs of
// their epoch on a store that declares a ConsistentBlobLister, else one
// StatBlob each, and nothing else of the blob store. traffic, when not
// nil, returns the requests store sent so far and the writes (PUT and
// POST) among them: on the wire the commit is then one listing request
// (a page holds 1,000 blobs on S3 and GCS) and the one write. So is a
// commit of 16 more blobs of that epoch: its listing starts after the
// last blob of the epoch the record references.
func testCommitManyBlobs(t *testing.T, store writefence.ConditionalStore, traffic func() (reqs, writes int64)) {
	const n = 1000
	ctx := t.Context()
	blobs := fakestore.New(store, fakestore.Options{})
	f := &writefence.Fence{Store: store, Blobs: blobs, Prefix: testserver.UniqueName(t) + "/"}
	listing := declares[writefence.ConsistentBlobLister](store)
	first := committedBlob(t, f, "a", 1, "the first segment")
	// The blobs go up 16 at a time, as a shipper's uploaders put them.
	refs := make([]writefence.BlobRef, n)
	var up errgroup.Group
	up.SetLimit(16)
	for i := range refs {
		up.Go(func() (err error) {
			refs[i], err = f.PutBlob(ctx, "wal", "0", "a", 2, strings.NewReader(fmt.Sprintf("segment %d", i)))
			return err
		})
	}
	require.NoError(t, up.Wait())

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
	assert.Zero(t, trace.Reads(), "no read of the record: the Fence wrote it last")
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
		assert.Equal(t, int64(1+1), reqsAfter-reqs, "requests: one listing, the write")
		t.Logf("a commit newly referencing %d blobs: %d requests", n, reqsAfter-reqs)
	}

	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, append([]writefence.BlobRef{first}, refs...), info.Blobs)
	assert.Equal(t, uint64(2), info.Epoch)
	got, err := readBlob(t, f, refs[n-1].Name)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("segment %d", n-1), got)

	// 16 more of epoch 2, which now holds 1,000, committed at 3: the
	// listing starts after the last the record references.
	more := make([]writefence.BlobRef, 16)
	for i := range more {
		more[i] = putBlob(t, f, "a", 2, fmt.Sprintf("segment %d", n+i))
	}
	calls = blobCalls(blobs)
	if traffic != nil {
		reqs, _ = traffic()
	}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 3, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, more...)
		return m, nil
	}))
	after = blobCalls(blobs)
	delta = [5]int64{after[0] - calls[0], after[1] - calls[1], after[2] - calls[2], after[3] - calls[3], after[4] - calls[4]}
	if listing {
		assert.Equal(t, [5]int64{0, 0, 0, 1, 0}, delta, "16 more in an epoch of 1,000: one listing")
	} else {
		assert.Equal(t, [5]int64{0, 0, 16, 0, 0}, delta, "16 more in an epoch of 1,000: one StatBlob each")
	}
	if traffic != nil {
		reqsAfter, _ := traffic()
		assert.Equal(t, int64(1+1), reqsAfter-reqs, "16 more in an epoch of 1,000: one listing, the write")
	}
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
		ListBlobsConsistent: func(context.Context, string, string, func(writefence.BlobInfo) error) error { return nil },
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

// unremembered is a payload too large for a Fence to remember: a write
// over a record that holds it reads the record.
var unremembered = bytes.Repeat([]byte("m"), 1024)

// TestCommitListsBesideItsRead: a commit of blobs its Fence put, over the
// record it wrote last, lists their epoch's blob space while it reads the
// record, not after (the read of the record is held until the listing has
// started: were they one after the other, every goroutine of the bubble
// would block), and so checks them with no StatBlob and no second listing;
// over a record whose payload the Fence remembers, it reads nothing. A
// commit by a Fence that put no blob, or that did not write the record
// last, lists after its read, as a listing that failed beside the read is
// done again after it.
func TestCommitListsBesideItsRead(t *testing.T) {
	t.Run("remembered", func(t *testing.T) {
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{})
		f := &writefence.Fence{Store: s}
		require.NoError(t, f.Push(t.Context(), "wal", "0", "a", 1, []byte("manifest")))
		refs := []writefence.BlobRef{putBlob(t, f, "a", 2, "one"), putBlob(t, f, "a", 2, "two")}
		gets := s.Calls(fakestore.Get)
		require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = refs
			return m, nil
		}))
		assert.EqualValues(t, 1, s.Calls(fakestore.ListBlobsConsistent))
		assert.Zero(t, s.Calls(fakestore.StatBlob))
		assert.Zero(t, s.Calls(fakestore.Get)-gets, "no read of the record")
		info, err := f.Inspect(t.Context(), "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, refs, info.Blobs)
		assert.Equal(t, []byte("manifest"), info.Payload)
	})
	t.Run("beside", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			listing := make(chan struct{})
			var once sync.Once
			var armed atomic.Bool
			s := fakestore.New(&writefence.MemStore{}, fakestore.Options{
				Before: func(ctx context.Context, c fakestore.Call) error {
					switch {
					case c.Op == fakestore.ListBlobsConsistent:
						once.Do(func() { close(listing) })
					case c.Op == fakestore.Get && armed.Load():
						<-listing
					}
					return nil
				},
			})
			f := &writefence.Fence{Store: s}
			require.NoError(t, f.Push(t.Context(), "wal", "0", "a", 1, unremembered))
			var refs []writefence.BlobRef
			for i := range 5 {
				refs = append(refs, putBlob(t, f, "a", 2, fmt.Sprint("segment ", i)))
			}
			gets := s.Calls(fakestore.Get)
			armed.Store(true)
			require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = refs
				return m, nil
			}))
			assert.EqualValues(t, 1, s.Calls(fakestore.ListBlobsConsistent))
			assert.Zero(t, s.Calls(fakestore.StatBlob))
			assert.EqualValues(t, 1, s.Calls(fakestore.Get)-gets, "one read of the record")
		})
	})
	// after commits two blobs put by a Fence, by that Fence (or, with
	// others, by a Fence that put none), over the record pushed by the
	// Fence (by another one with others; none without push), with faults
	// injected once the blobs are put, and returns the reads of the record
	// and the listings the commit made, in the order they began. It runs
	// in a bubble, whose other goroutines (a listing beside the read) run
	// until they block before the read begins.
	after := func(t *testing.T, push, others bool, faults ...fakestore.Fault) (ops []fakestore.Op, s fakestore.Store) {
		t.Helper()
		var mu sync.Mutex
		var armed atomic.Bool
		s = fakestore.New(&writefence.MemStore{}, fakestore.Options{
			Before: func(ctx context.Context, c fakestore.Call) error {
				if armed.Load() && c.Op == fakestore.Get {
					synctest.Wait()
				}
				mu.Lock()
				defer mu.Unlock()
				if armed.Load() && (c.Op == fakestore.Get || c.Op == fakestore.ListBlobsConsistent) {
					ops = append(ops, c.Op)
				}
				return nil
			},
		})
		f := &writefence.Fence{Store: s, RetryDelay: time.Microsecond}
		pusher, committer := f, f
		if others {
			pusher, committer = &writefence.Fence{Store: s}, &writefence.Fence{Store: s}
		}
		epoch := uint64(1)
		if push {
			require.NoError(t, pusher.Push(t.Context(), "wal", "0", "a", 1, unremembered))
			epoch = 2
		}
		refs := []writefence.BlobRef{putBlob(t, f, "a", epoch, "one"), putBlob(t, f, "a", epoch, "two")}
		for _, fault := range faults {
			s.Inject(fault)
		}
		armed.Store(true)
		require.NoError(t, committer.Commit(t.Context(), "wal", "0", "a", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = refs
			return m, nil
		}))
		assert.Zero(t, s.Calls(fakestore.StatBlob))
		return ops, s
	}
	readThenList := []fakestore.Op{fakestore.Get, fakestore.ListBlobsConsistent}
	t.Run("no blob put", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ops, _ := after(t, true, true)
			assert.Equal(t, readThenList, ops, "the read, then the listing")
		})
	})
	t.Run("record not written by the Fence", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ops, _ := after(t, false, false)
			assert.Equal(t, readThenList, ops, "no record: the read, then the listing")
		})
	})
	t.Run("failed beside", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ops, _ := after(t, true, false, throttled(fakestore.ListBlobsConsistent, 1))
			assert.Equal(t, []fakestore.Op{fakestore.ListBlobsConsistent, fakestore.Get, fakestore.ListBlobsConsistent}, ops,
				"the listing beside the read, the read, the listing after it")
		})
	})
}

// TestCommitLeavesAListingItDoesNotUse: a commit that adds no blob of the
// epoch its Fence last put at leaves the listing started beside its read
// unused, and does not wait for it: over a store whose listing takes an
// hour, the commit of a blob of an earlier epoch checks it with StatBlob
// and takes no time, and the listing it left ends with the commit.
func TestCommitLeavesAListingItDoesNotUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{
			Before: func(ctx context.Context, c fakestore.Call) error {
				if c.Op == fakestore.ListBlobsConsistent {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Hour):
					}
				}
				return nil
			},
		})
		f := &writefence.Fence{Store: s}
		require.NoError(t, f.Push(t.Context(), "wal", "0", "a", 1, []byte("manifest")))
		early := putBlob(t, f, "a", 1, "segment")
		putBlob(t, f, "a", 2, "the next epoch's segment")
		start := time.Now()
		require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, appendBlob(early)))
		assert.Zero(t, time.Since(start), "the commit waited for the listing of epoch 2, which it did not use")
		assert.EqualValues(t, 1, s.Calls(fakestore.ListBlobsConsistent), "the listing beside the read")
		assert.EqualValues(t, 1, s.Calls(fakestore.StatBlob), "the blob of epoch 1")
	})
}

// listedBefore returns a Fence over mem that, once armed is set, runs
// between right after its first listing of blobs ends, before the listing
// returns: what the listing showed is older than what between does, and
// the commit's decision and write come after it.
func listedBefore(t *testing.T, mem *writefence.MemStore, between func()) (*writefence.Fence, fakestore.Store, *atomic.Bool) {
	t.Helper()
	var armed atomic.Bool
	var listOnce sync.Once
	s := fakestore.New(mem, fakestore.Options{
		After: func(ctx context.Context, c fakestore.Call, err error) error {
			if armed.Load() && c.Op == fakestore.ListBlobsConsistent {
				listOnce.Do(between)
			}
			return err
		},
	})
	return &writefence.Fence{Store: s}, s, &armed
}

// TestCommitListedBeforeACollect: a commit whose listing showed its blob,
// which Collect then deleted (raising the record's collection horizon
// first, the blob being older than the grace), is refused, and so it is
// when the record was then set back from outside to its content before
// the horizon (a restore from backup), which leaves a read that tells
// nothing of the deletion but, on MemStore as on every store but S3, a
// new version (promises 20 and 24; see the README); over a record whose
// payload the Fence remembers (a commit that reads nothing) as over one
// it reads. The record is no longer at the version the listing began at,
// so the listing is no evidence: the commit checks its blob after a read.
func TestCommitListedBeforeACollect(t *testing.T) {
	for _, c := range []struct {
		setBack bool
		payload []byte
	}{{false, []byte("manifest")}, {true, []byte("manifest")}, {false, unremembered}, {true, unremembered}} {
		setBack := c.setBack
		t.Run(fmt.Sprintf("set back=%v/payload=%d", setBack, len(c.payload)), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				clock := &fakeclock.Clock{}
				mem := &writefence.MemStore{Clock: clock.Now}
				key := mustKey(t, "wal", "0")
				collector := &writefence.Fence{Store: mem}
				var before []byte
				var report writefence.GCReport
				var collectErr, setBackErr error
				f, s, armed := listedBefore(t, mem, func() {
					clock.Advance(2 * time.Hour)
					report, collectErr = collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
					if collectErr != nil || !setBack {
						return
					}
					_, v, err := mem.Get(ctx, key)
					if setBackErr = err; err == nil {
						_, setBackErr = mem.PutIfVersion(ctx, key, before, v)
					}
				})
				// A stream's record, over which Collect raises a horizon.
				require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, func(writefence.Manifest) (writefence.Manifest, error) {
					return writefence.Manifest{Payload: c.payload}, nil
				}))
				before, _, _ = mem.Get(ctx, key)
				ref := putBlob(t, f, "a", 2, "segment")
				armed.Store(true)
				err := f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref))
				require.NoError(t, collectErr)
				require.NoError(t, setBackErr)
				require.Len(t, report.Deleted, 1, "Collect deleted the blob after the listing")
				assert.Equal(t, blobKey(t, ref.Name), report.Deleted[0].Key)
				require.ErrorIs(t, err, writefence.ErrNotFound)
				assert.EqualValues(t, 1, s.Calls(fakestore.ListBlobsConsistent), "the listing")
				assert.EqualValues(t, 1, s.Calls(fakestore.StatBlob), "the check after the read")
				info, err := collector.Inspect(ctx, "wal", "0")
				require.NoError(t, err)
				assert.Empty(t, info.Blobs, "no reference to a deleted blob landed")
				assert.Equal(t, uint64(1), info.Epoch)
			})
		})
	}
}

// TestCommitStatsWhatItsListingDidNotShow: a blob of the listed epoch put
// after the commit's listing ran (by another Fence of the writer) is not
// in that complete listing; the commit checks it with StatBlob and lands,
// rather than take the listing's silence for its absence.
func TestCommitStatsWhatItsListingDidNotShow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := &writefence.MemStore{}
		other := &writefence.Fence{Store: mem}
		var late writefence.BlobRef
		put := make(chan struct{})
		f, s, armed := listedBefore(t, mem, func() {
			late = putBlob(t, other, "a", 2, "put after the listing")
			close(put)
		})
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("manifest")))
		early := putBlob(t, f, "a", 2, "segment")
		armed.Store(true)
		require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
			<-put // the writer learns of the late blob once the listing ran
			m.Blobs = append(m.Blobs, early, late)
			return m, nil
		}))
		assert.EqualValues(t, 1, s.Calls(fakestore.ListBlobsConsistent), "the listing, complete")
		assert.EqualValues(t, 1, s.Calls(fakestore.StatBlob), "the blob it did not show")
		info, err := f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, []writefence.BlobRef{early, late}, info.Blobs)
	})
}

// declares reports whether s declares the capability C as its own.
func declares[C any](s writefence.ConditionalStore) bool {
	c, ok := s.(writefence.Capable)
	_, has := s.(C)
	return ok && has && c.Capabilities() == s
}

// TestCommitInALongEpoch: a commit lists an epoch's blobs only from the
// least of its new ones (blob names sort in the order they were put), so
// a commit of a few new blobs in an epoch of a thousand lists those few
// and stats none: by the listing beside the read when its Fence wrote the
// record last (after the last blob the record references), and by the
// listing of its check when not.
func TestCommitInALongEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		m := &writefence.MemStore{}
		var listed atomic.Int64
		s := fakestore.New(m, fakestore.Options{ListBlobsConsistent: func(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
			return m.ListBlobsConsistent(ctx, prefix, after, func(b writefence.BlobInfo) error { listed.Add(1); return fn(b) })
		}})
		epoch := uint64(1)
		commit := func(f *writefence.Fence, n int) (listings, entries, stats int64) {
			time.Sleep(time.Millisecond) // the blobs of another millisecond
			l0, e0, s0 := s.Calls(fakestore.ListBlobsConsistent), listed.Load(), s.Calls(fakestore.StatBlob)
			var refs []writefence.BlobRef
			for i := range n {
				refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprint("segment ", i)))
			}
			epoch++ // the blobs stay those of epoch 1: a term's blobs, committed at rising epochs
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, refs...)
				return m, nil
			}))
			return s.Calls(fakestore.ListBlobsConsistent) - l0, listed.Load() - e0, s.Calls(fakestore.StatBlob) - s0
		}
		f := &writefence.Fence{Store: s}
		for _, c := range []struct {
			f    *writefence.Fence
			n    int
			what string
		}{
			{f, 990, "a fresh epoch's blobs"},
			{f, 10, "beside the read"},
			{f, 16, "beside the read, 1,000 blobs of the epoch referenced"},
			{&writefence.Fence{Store: s}, 16, "a Fence that wrote nothing, 1,016 blobs of the epoch referenced"},
		} {
			listings, entries, stats := commit(c.f, c.n)
			assert.EqualValues(t, []int64{1, int64(c.n), 0}, []int64{listings, entries, stats}, "%s: listings, blobs listed, StatBlobs", c.what)
		}
	})
}

// TestCommitOfABlobPutBeforeTheLastReferenced: a blob put before the last
// one the record references sorts before it, where the listing beside the
// commit's read does not start: the commit stats it, finds it, and lands.
func TestCommitOfABlobPutBeforeTheLastReferenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{})
		f := &writefence.Fence{Store: s}
		early := putBlob(t, f, "a", 1, "put first, committed last")
		time.Sleep(time.Millisecond)
		late := committedBlob(t, f, "a", 1, "put last, committed first")
		require.Less(t, early.Name, late.Name)
		assert.Equal(t, []int64{1, 1}, listsAndStats(t, s, func() error { return f.Commit(ctx, "wal", "0", "a", 2, appendBlob(early)) }),
			"the listing after the last referenced blob, and a StatBlob of the one it did not show")
		info, err := f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, []writefence.BlobRef{late, early}, info.Blobs)
	})
}

// testCommitAfterEscapedKeys: on store, a writer whose name escapes to
// '%' and other bytes that travel escaped in a listing's start commits
// blobs, after blobs of a clock ahead and before them: every commit lands
// with no StatBlob of a blob its listings could show, and one of a
// deleted blob is refused.
func testCommitAfterEscapedKeys(t *testing.T, inner writefence.ConditionalStore) {
	ctx := t.Context()
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
}

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
// once restarted with its clock set right. The listing beside each of its
// commits passes over that name (its time is ahead of any this Fence could
// have put) and shows the new blobs: one listing, no StatBlob, and the
// commit lands; a missing one among them is refused.
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
		assert.Equal(t, []int64{1, 0}, listsAndStats(t, s, func() error { return commit(f, "a", refs...) }),
			"listings (beside the read), StatBlobs")
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
// after every blob it puts since; over a record that references some, the
// listing beside a commit of new blobs of their epoch passes over their
// names (a time far ahead) and shows the new ones: one listing, no
// StatBlob, and the commit lands.
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
		assert.Equal(t, []int64{1, 0}, listsAndStats(t, s, func() error { return commit(f, "a", refs...) }),
			"listings (beside the read), StatBlobs")
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

// listsAndStats runs commit, which must succeed, and returns the
// ListBlobsConsistent and StatBlob calls s saw meanwhile.
func listsAndStats(t *testing.T, s fakestore.Store, commit func() error) []int64 {
	t.Helper()
	lists, stats := s.Calls(fakestore.ListBlobsConsistent), s.Calls(fakestore.StatBlob)
	require.NoError(t, commit())
	return []int64{s.Calls(fakestore.ListBlobsConsistent) - lists, s.Calls(fakestore.StatBlob) - stats}
}

// TestAheadListingWaitEndedCtx: a commit whose ctx ended before it waits
// for the listing started beside its read takes no evidence from it, even
// when the listing ended too, every time: not at the runtime's pick.
func TestAheadListingWaitEndedCtx(t *testing.T) {
	l := writefence.EndedAheadListing("p/")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 64 {
		_, _, ok := l.Wait(ctx, []string{"p/"})
		require.False(t, ok)
	}
}
