package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// The floor survives the record (promises 29 to 32): a record deleted or
// set back under a Fence, a Lease or a TermSource that saw it, KeepFloor,
// and Check, on MemStore and the directory store.

// lossStore is a store a test deletes records of and sets back from
// outside the package.
type lossStore interface {
	writefence.ConditionalStore
	writefence.Deleter
}

// lossStores returns MemStore and a directory store.
func lossStores(t *testing.T) map[string]lossStore {
	return map[string]lossStore{"mem": &writefence.MemStore{}, "dir": newDirStore(t, t.TempDir())}
}

// eachLossStore runs test on each of lossStores, as a subtest named after
// it.
func eachLossStore(t *testing.T, test func(t *testing.T, s lossStore)) {
	for name, s := range lossStores(t) {
		t.Run(name, func(t *testing.T) { test(t, s) })
	}
}

// setBack writes data at key over whatever it holds, as a restore from
// backup would, and returns the new version.
func setBack(t *testing.T, s writefence.ConditionalStore, key string, data []byte) string {
	t.Helper()
	_, v, err := s.Get(context.Background(), key)
	if errors.Is(err, writefence.ErrNotFound) {
		v = ""
	} else {
		require.NoError(t, err)
	}
	nv, err := s.PutIfVersion(context.Background(), key, data, v)
	require.NoError(t, err)
	return nv
}

// setBackOnRead returns ctx with a hook that sets the record at key back
// to data (setBack) right before the nth read of key made under it, and
// the count of those reads.
func setBackOnRead(ctx context.Context, t *testing.T, s writefence.ConditionalStore, key string, data []byte, n int) (context.Context, *int) {
	reads := new(int)
	return hook.With(ctx, &hook.Hooks{Read: func(_ context.Context, k string) error {
		if k == key {
			if *reads++; *reads == n {
				setBack(t, s, key, data)
			}
		}
		return nil
	}}), reads
}

// bytesAt returns what s holds at key.
func bytesAt(t *testing.T, s writefence.ConditionalStore, key string) []byte {
	t.Helper()
	data, _, err := s.Get(context.Background(), key)
	require.NoError(t, err)
	return data
}

// requireRegressed fails unless err is an *EpochRegressedError equal to
// want, matching ErrEpochRegressed and not ErrStaleEpoch.
func requireRegressed(t *testing.T, err error, want writefence.EpochRegressedError) {
	t.Helper()
	var re *writefence.EpochRegressedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, want, *re)
	assert.ErrorIs(t, err, writefence.ErrEpochRegressed)
	assert.NotErrorIs(t, err, writefence.ErrStaleEpoch)
}

// TestRecordLost: a record deleted under the Fence that wrote it. Every
// write of that Fence is refused, writing nothing, and the Observer sees
// it as "regressed"; a Fence that never saw the shard cannot know; the
// operator's settle with Lost writes it afresh above the floor asserted,
// and Forget lets one Fence carry on.
func TestRecordLost(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		var outcomes []string
		f := &writefence.Fence{Store: s, Observer: func(_ context.Context, e writefence.WriteEvent) {
			if !e.Retrying {
				outcomes = append(outcomes, e.Op+" "+e.Outcome())
			}
		}}
		key := mustKey(t, "wal", "0")
		require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1<<32|1))
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1<<32|2, []byte("two")))
		require.NoError(t, s.Delete(ctx, key))
		outcomes = nil

		want := writefence.EpochRegressedError{Op: "push", Key: key, Epoch: 1<<32 | 3, Seen: 1<<32 | 2, SeenWriter: "a", Absent: true}
		requireRegressed(t, f.Push(ctx, "wal", "0", "a", 1<<32|3, []byte("three")), want)
		want.Op = "update"
		requireRegressed(t, f.Update(ctx, "wal", "0", "a", 1<<32|3, func(cur []byte) ([]byte, error) { return cur, nil }), want)
		want.Op = "commit"
		requireRegressed(t, f.Commit(ctx, "wal", "0", "a", 1<<32|3, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil }), want)
		want.Op, want.Epoch = "seal", 2<<32|1
		requireRegressed(t, f.Seal(ctx, "wal", "0", "b", 2<<32|1), want)
		_, _, err := s.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written")
		assert.Equal(t, []string{"push regressed", "update regressed", "commit regressed", "seal regressed"}, outcomes)

		// Reads report what is there; Check, which asks whether the
		// writer still holds the shard, refuses.
		_, _, _, err = f.Latest(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrNotFound)
		requireRegressed(t, f.Check(ctx, "wal", "0", "a", 1<<32|2),
			writefence.EpochRegressedError{Op: "check", Key: key, Epoch: 1<<32 | 2, Seen: 1<<32 | 2, SeenWriter: "a", Absent: true})

		// The bound: a Fence that never saw the shard takes it for new.
		fresh := &writefence.Fence{Store: s}
		require.NoError(t, fresh.Push(ctx, "wal", "0", "zombie", 1, []byte("one")))
		requireRegressed(t, f.Push(ctx, "wal", "0", "a", 1<<32|3, []byte("three")),
			writefence.EpochRegressedError{Op: "push", Key: key, Epoch: 1<<32 | 3, Seen: 1<<32 | 2, SeenWriter: "a", Found: 1, FoundWriter: "zombie"})

		// The operator settles the record lost above the highest epoch
		// ever granted; a settle below what the Fence saw is refused.
		info, err := f.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		low := writefence.Settlement{Version: info.Version, Lost: true, Writer: "op", Floor: 1, Epoch: 2, Payload: []byte("s")}
		requireRegressed(t, f.Settle(ctx, "wal", "0", low),
			writefence.EpochRegressedError{Op: "settle", Key: key, Epoch: 2, Seen: 1<<32 | 2, SeenWriter: "a", Found: 1, FoundWriter: "zombie"})
		settle := writefence.Settlement{Version: info.Version, Lost: true, Writer: "op", Floor: 2<<32 - 1, Epoch: 2 << 32, Payload: []byte("settled")}
		require.NoError(t, f.Settle(ctx, "wal", "0", settle))
		require.NoError(t, f.Settle(ctx, "wal", "0", settle), "a settle run again once it landed")
		require.NoError(t, f.Seal(ctx, "wal", "0", "b", 2<<32|1))
		require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 1<<32|3, nil), writefence.ErrStaleEpoch)
		require.NoError(t, f.Push(ctx, "wal", "0", "b", 2<<32|2, []byte("b")))

		// Forget: the Fence takes the record as it is.
		require.NoError(t, s.Delete(ctx, key))
		require.ErrorIs(t, f.Push(ctx, "wal", "0", "b", 2<<32|3, nil), writefence.ErrEpochRegressed)
		require.NoError(t, f.Forget("wal", "0"))
		require.NoError(t, f.Push(ctx, "wal", "0", "b", 2<<32|3, []byte("again")))
		require.ErrorIs(t, f.Forget("", "0"), writefence.ErrInvalidArgument)
	})
}

// TestRecordSetBack: the record set back to an earlier version's bytes.
// Reads count as seen: a Fence that only read the later record refuses
// too; Inspect and Latest report what the store holds.
func TestRecordSetBack(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		writer, reader := &writefence.Fence{Store: s}, &writefence.Fence{Store: s}
		key := mustKey(t, "wal", "0")
		require.NoError(t, writer.Push(ctx, "wal", "0", "a", 5, []byte("five")))
		five := bytesAt(t, s, key)
		require.NoError(t, writer.Push(ctx, "wal", "0", "a", 6, []byte("six")))
		_, err := reader.Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		restored := setBack(t, s, key, five)

		want := writefence.EpochRegressedError{Op: "push", Key: key, Epoch: 7, Seen: 6, SeenWriter: "a", Found: 5, FoundWriter: "a"}
		requireRegressed(t, writer.Push(ctx, "wal", "0", "a", 7, []byte("seven")), want)
		requireRegressed(t, reader.Push(ctx, "wal", "0", "a", 7, []byte("seven")), want)
		e, _, p, err := reader.Latest(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(5), e)
		assert.Equal(t, "five", string(p))
		_, v, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, restored, v, "nothing written")

		// A stale write stays stale: its refusal is the rule's.
		require.ErrorIs(t, writer.Push(ctx, "wal", "0", "z", 4, nil), writefence.ErrStaleEpoch)
	})
}

// TestKeepFloor: the floor kept apart from the record.
func TestKeepFloor(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s, KeepFloor: true}
		key := mustKey(t, "wal", "0")
		floorKey, err := keys.Floor("", "wal", "0")
		require.NoError(t, err)

		// A shard's first record only by a seal.
		for _, err := range []error{
			f.Push(ctx, "wal", "0", "a", 1, nil),
			f.Update(ctx, "wal", "0", "a", 1, func(cur []byte) ([]byte, error) { return cur, nil }),
			f.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil }),
		} {
			require.ErrorIs(t, err, writefence.ErrNotFound)
			assert.Contains(t, err.Error(), "under KeepFloor only a seal or a settle creates one")
		}
		require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1<<32|1))
		sealed := bytesAt(t, s, key)
		info, err := (&writefence.Fence{Store: s, Prefix: "writefence/"}).Inspect(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(1<<32|1), info.Epoch)
		floor, _, err := s.Get(ctx, floorKey)
		require.NoError(t, err)
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1<<32|2, []byte("two")))
		assert.Equal(t, floor, bytesAt(t, s, floorKey), "a push leaves the floor as it is")

		// A Fence that never saw the shard refuses it deleted.
		require.NoError(t, s.Delete(ctx, key))
		fresh := &writefence.Fence{Store: s, KeepFloor: true}
		want := writefence.EpochRegressedError{Op: "seal", Key: key, Epoch: 2<<32 | 1, Seen: 1<<32 | 1, SeenWriter: "a", Floor: true, Absent: true}
		requireRegressed(t, fresh.Seal(ctx, "wal", "0", "b", 2<<32|1), want)
		requireRegressed(t, fresh.Check(ctx, "wal", "0", "a", 1<<32|2),
			writefence.EpochRegressedError{Op: "check", Key: key, Epoch: 1<<32 | 2, Seen: 1<<32 | 1, SeenWriter: "a", Floor: true, Absent: true})

		// Set back to the seal's own record: within the tenure the
		// floor does not tell; the Fence that wrote the push does.
		setBack(t, s, key, sealed)
		require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 1<<32|3, nil), writefence.ErrEpochRegressed)
		require.NoError(t, fresh.Push(ctx, "wal", "0", "a", 1<<32|3, []byte("three")))

		// A settle not above the floor is stale, naming the floor.
		require.NoError(t, s.Delete(ctx, key))
		err = fresh.Settle(ctx, "wal", "0", writefence.Settlement{Lost: true, Writer: "op", Floor: 1, Epoch: 1<<32 | 1})
		var se *writefence.StaleEpochError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, floorKey, se.Key)
		assert.Equal(t, uint64(1<<32|1), se.RecordedEpoch)
		_, _, err = s.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written")

		// The settle of the lost record raises the floor.
		require.NoError(t, fresh.Settle(ctx, "wal", "0", writefence.Settlement{Lost: true, Writer: "op", Floor: 3<<32 - 1, Epoch: 3 << 32, Payload: []byte("s")}))
		require.ErrorIs(t, (&writefence.Fence{Store: s, KeepFloor: true}).Seal(ctx, "wal", "0", "b", 2<<32|9), writefence.ErrStaleEpoch)
		require.NoError(t, s.Delete(ctx, key))
		requireRegressed(t, (&writefence.Fence{Store: s, KeepFloor: true}).Seal(ctx, "wal", "0", "b", 4<<32|1),
			writefence.EpochRegressedError{Op: "seal", Key: key, Epoch: 4<<32 | 1, Seen: 3 << 32, SeenWriter: "op", Floor: true, Absent: true})
	})
}

// TestKeepFloorDamaged: a floor that does not decode, or of another
// identity, refuses every write of the shard, naming the floor's key.
func TestKeepFloorDamaged(t *testing.T) {
	ctx := t.Context()
	s := &writefence.MemStore{}
	f := &writefence.Fence{Store: s, KeepFloor: true}
	require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1))
	floorKey, err := keys.Floor("", "wal", "0")
	require.NoError(t, err)
	record := bytesAt(t, s, mustKey(t, "wal", "0"))

	setBack(t, s, floorKey, []byte("garbage"))
	err = f.Push(ctx, "wal", "0", "a", 2, nil)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, floorKey, ce.Key)
	assert.Equal(t, record, bytesAt(t, s, mustKey(t, "wal", "0")), "nothing written")

	require.NoError(t, s.Delete(ctx, floorKey))
	require.NoError(t, (&writefence.Fence{Store: s, Identity: "other/v1", KeepFloor: true}).Seal(ctx, "wal", "1", "a", 1))
	otherFloor, err := keys.Floor("", "wal", "1")
	require.NoError(t, err)
	setBack(t, s, floorKey, bytesAt(t, s, otherFloor))
	var we *writefence.WireError
	require.ErrorAs(t, f.Push(ctx, "wal", "0", "a", 2, nil), &we)
	assert.Equal(t, floorKey, we.Key)

	// The way out the README gives: delete the key by hand, then settle
	// the record above the highest epoch granted, which keeps the floor.
	require.NoError(t, s.Delete(ctx, floorKey))
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Lost: true, Version: info.Version, Writer: "op", Floor: 5, Epoch: 6}))
	_, _, err = s.Get(ctx, floorKey)
	require.NoError(t, err, "the settle wrote the floor again")
	require.NoError(t, s.Delete(ctx, mustKey(t, "wal", "0")))
	requireRegressed(t, (&writefence.Fence{Store: s, KeepFloor: true}).Seal(ctx, "wal", "0", "b", 5),
		writefence.EpochRegressedError{Op: "seal", Key: mustKey(t, "wal", "0"), Epoch: 5, Seen: 6, SeenWriter: "op", Floor: true, Absent: true})
}

// TestKeepFloorCost: a steady push costs one read, of the floor, under
// KeepFloor, and none without; a seal one write more, of the floor.
func TestKeepFloorCost(t *testing.T) {
	ctx := t.Context()
	for _, keep := range []bool{false, true} {
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.Declared})
		f := &writefence.Fence{Store: s, KeepFloor: keep}
		require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1))
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, nil))
		before := s.Calls(fakestore.Get)
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, nil))
		want := int64(0)
		if keep {
			want = 1
		}
		assert.Equal(t, want, s.Calls(fakestore.Get)-before, "reads of a steady push with KeepFloor %t", keep)
	}
}

// TestCollectChecksTenure: Collect reads the record again right before it
// deletes, and deletes nothing once the record was set back below the
// tenure it judged the blobs by; a Fence that saw the record above what
// Collect finds refuses at once; a shard retired with RecordGone whose
// record reappears keeps its blobs.
func TestCollectChecksTenure(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		a, b := &writefence.Fence{Store: s}, &writefence.Fence{Store: s}
		key := mustKey(t, "wal", "0")
		kept, err := a.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader("kept"))
		require.NoError(t, err)
		loose, err := a.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader("loose"))
		require.NoError(t, err)
		require.NoError(t, a.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, kept)
			return m, nil
		}))
		committed := bytesAt(t, s, key)
		// The takeover's seal: a's unreferenced blob is a deposed
		// writer's, deleted at once...
		require.NoError(t, b.Seal(ctx, "wal", "0", "b", 2))
		looseKey, err := keys.Blob("", "wal", "0", loose.Name)
		require.NoError(t, err)

		// ...unless the record is set back, which makes it a's to
		// commit again, between Collect's read and its deletes.
		hctx, _ := setBackOnRead(ctx, t, s, key, committed, 2)
		gc := &writefence.Fence{Store: s}
		report, err := gc.Collect(hctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
		require.ErrorIs(t, err, writefence.ErrEpochRegressed)
		assert.Empty(t, report.Deleted)
		_, err = s.(writefence.BlobStore).StatBlob(ctx, looseKey)
		require.NoError(t, err, "the blob the record set back lets a commit again")
		require.NoError(t, a.Commit(ctx, "wal", "0", "a", 3, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, loose)
			return m, nil
		}), "and a's commit of it over the record set back lands")

		// A Fence that saw a higher epoch refuses the collection.
		require.NoError(t, b.Seal(ctx, "wal", "0", "b", 4))
		setBack(t, s, key, committed)
		_, err = b.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
		requireRegressed(t, err, writefence.EpochRegressedError{Op: "collect", Key: key, Seen: 4, SeenWriter: "b", Found: 1, FoundWriter: "a"})

		// RecordGone: the record written again before the deletes.
		require.NoError(t, s.Delete(ctx, key))
		hctx, _ = setBackOnRead(ctx, t, s, key, committed, 2)
		report, err = (&writefence.Fence{Store: s}).Collect(hctx, "wal", "0", writefence.GCOptions{RecordGone: true})
		require.ErrorIs(t, err, writefence.ErrInvalidArgument)
		assert.Empty(t, report.Deleted)
	})
}

// TestCollectChecksTenureBeforeEachBatch: Collect deletes in batches, and
// reads the record again right before each, not only before the first: a
// record set back after the first batch went stops the deletes there. On
// a store with a batch delete a batch is 1,000 blobs (one request), on
// the directory store, which deletes one blob a call, 100.
func TestCollectChecksTenureBeforeEachBatch(t *testing.T) {
	for _, c := range []struct {
		name     string
		store    lossStore
		n, batch int
	}{
		{"mem", &writefence.MemStore{}, 25000, 10000},
		{"dir", newDirStore(t, t.TempDir()), 250, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			s := c.store
			a := &writefence.Fence{Store: s}
			key := mustKey(t, "wal", "0")
			require.NoError(t, a.Commit(ctx, "wal", "0", "a", 1, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Payload = []byte("a's manifest")
				return m, nil
			}))
			committed := bytesAt(t, s, key)
			for i := range c.n {
				_, err := a.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader(fmt.Sprint(i)))
				require.NoError(t, err)
			}
			// b's takeover makes every blob of a deposed writer's.
			require.NoError(t, (&writefence.Fence{Store: s}).Seal(ctx, "wal", "0", "b", 2))

			// The record's reads: Collect's first, then one before each
			// batch. It is set back to a's record, whose writer may commit
			// the blobs again, right before the second batch.
			hctx, reads := setBackOnRead(ctx, t, s, key, committed, 3)
			report, err := (&writefence.Fence{Store: s}).Collect(hctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			require.ErrorIs(t, err, writefence.ErrEpochRegressed)
			assert.Len(t, report.Deleted, c.batch, "the first batch, deleted before the record was set back")
			assert.Equal(t, 3, *reads, "the record read, then read again before each of two batches")
			space, err := keys.Blobs("", "wal", "0")
			require.NoError(t, err)
			left := 0
			require.NoError(t, s.(writefence.BlobStore).ListBlobs(ctx, space, func(writefence.BlobInfo) error { left++; return nil }))
			assert.Equal(t, c.n-c.batch, left, "the blobs of the batches after the record was set back")
		})
	}
}

// TestRegressionNoFalseAlarm: many goroutines share one Fence, pushing
// rising epochs of one shard and reading it at once; a read under way
// while another goroutine's push lands is never taken for a record gone
// back. Run with -race.
func TestRegressionNoFalseAlarm(t *testing.T) {
	const writers, rounds = 8, 30
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s, RetryDelay: time.Microsecond, MaxAttempts: 100}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, writers*rounds*2)
		for w := range writers {
			wg.Go(func() {
				<-start
				for r := range rounds {
					epoch := uint64(r*writers + w + 1)
					err := f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), epoch, []byte{byte(w)})
					if err != nil && !errors.Is(err, writefence.ErrStaleEpoch) {
						errs <- err
					}
					if _, err := f.Inspect(ctx, "wal", "0"); err != nil && !errors.Is(err, writefence.ErrNotFound) {
						errs <- err
					}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestRegressionUnderDelete: goroutines of one Fence push while the
// record is deleted from outside; every push that begins after the delete
// returned is refused as regressed, and none lands. Run with -race.
func TestRegressionUnderDelete(t *testing.T) {
	const writers = 8
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s, RetryDelay: time.Microsecond, MaxAttempts: 100}
		key := mustKey(t, "wal", "0")
		push := func(base uint64) []error {
			return together(writers, func(w int) error {
				return f.Push(ctx, "wal", "0", "w", base+uint64(w), []byte("x"))
			})
		}
		for _, err := range push(1) {
			if err != nil {
				require.ErrorIs(t, err, writefence.ErrStaleEpoch)
			}
		}
		require.NoError(t, s.Delete(ctx, key))
		for _, err := range push(100) {
			require.ErrorIs(t, err, writefence.ErrEpochRegressed)
		}
		_, _, err := s.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
	})
}

// TestRegressedOwnRecord (promise 29): a record set back to exactly a
// write the caller repeats (a retry of a push, an update or a seal whose
// reply was lost) under a Fence that saw the record higher since. The
// write is not reported landed: the record went back below what the Fence
// saw, and the call is refused as regressed, writing nothing.
func TestRegressedOwnRecord(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s}
		key := mustKey(t, "wal", "0")
		same := func(cur []byte) ([]byte, error) { return cur, nil }

		require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1<<32|1))
		sealed := bytesAt(t, s, key)
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1<<32|2, []byte("two")))
		pushed := bytesAt(t, s, key)
		// The takeover, which this Fence sees.
		require.NoError(t, f.Seal(ctx, "wal", "0", "b", 2<<32|1))

		for _, tt := range []struct {
			name  string
			bytes []byte
			call  func() error
			want  writefence.EpochRegressedError
		}{
			{"push", pushed, func() error { return f.Push(ctx, "wal", "0", "a", 1<<32|2, []byte("two")) },
				writefence.EpochRegressedError{Op: "push", Key: key, Epoch: 1<<32 | 2, Seen: 2<<32 | 1, SeenWriter: "b", Found: 1<<32 | 2, FoundWriter: "a"}},
			{"update", pushed, func() error { return f.Update(ctx, "wal", "0", "a", 1<<32|2, same) },
				writefence.EpochRegressedError{Op: "update", Key: key, Epoch: 1<<32 | 2, Seen: 2<<32 | 1, SeenWriter: "b", Found: 1<<32 | 2, FoundWriter: "a"}},
			{"seal", sealed, func() error { return f.Seal(ctx, "wal", "0", "a", 1<<32|1) },
				writefence.EpochRegressedError{Op: "seal", Key: key, Epoch: 1<<32 | 1, Seen: 2<<32 | 1, SeenWriter: "b", Found: 1<<32 | 1, FoundWriter: "a"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				v := setBack(t, s, key, tt.bytes)
				requireRegressed(t, tt.call(), tt.want)
				_, got, err := s.Get(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, v, got, "nothing written")
			})
		}
	})
}

// TestSettleRegressedOwnRecord (promise 29): a settle run again over a
// record set back to exactly that settle, under a Fence that saw the
// record higher since, is refused as regressed, as every settle below
// what the Fence saw is, rather than reported landed.
func TestSettleRegressedOwnRecord(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s}
		key := mustKey(t, "wal", "0")
		require.NoError(t, f.Seal(ctx, "wal", "0", "a", 1))
		require.NoError(t, s.Delete(ctx, key))
		settle := writefence.Settlement{Lost: true, Writer: "op", Floor: 1, Epoch: 2, Payload: []byte("s")}
		require.NoError(t, f.Settle(ctx, "wal", "0", settle))
		settled := bytesAt(t, s, key)
		require.NoError(t, f.Seal(ctx, "wal", "0", "b", 3))

		v := setBack(t, s, key, settled)
		requireRegressed(t, f.Settle(ctx, "wal", "0", settle),
			writefence.EpochRegressedError{Op: "settle", Key: key, Epoch: 2, Seen: 3, SeenWriter: "b", Found: 2, FoundWriter: "op"})
		_, got, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, v, got, "nothing written")
	})
}

// TestKeepFloorRefusalAfterTheRecordLanded (promises 3 and 31): under
// KeepFloor a Seal or a Settle writes its record, then the floor. When the
// store refuses the floor's write (here credentials that reach the records
// but not the reserved space; a floor key damaged or of another identity
// in between does the same), the call returns the refusal, saying that
// the record landed, which it did; called again with the floor's write
// allowed, it enters the floor.
func TestKeepFloorRefusalAfterTheRecordLanded(t *testing.T) {
	floorKey, err := keys.Floor("", "wal", "0")
	require.NoError(t, err)
	denied := &writefence.StoreError{Op: "mem put", Key: floorKey, Err: fmt.Errorf("%w: access denied", fs.ErrPermission)}
	settlement := func(f *writefence.Fence) writefence.Settlement {
		info, err := f.Inspect(t.Context(), "wal", "0")
		require.NoError(t, err)
		return writefence.Settlement{Lost: true, Version: info.Version, Writer: "op", Floor: 1, Epoch: 2, Payload: []byte("s")}
	}
	for _, tt := range []struct {
		name string
		call func(f *writefence.Fence, s writefence.Settlement) error
	}{
		{"seal", func(f *writefence.Fence, _ writefence.Settlement) error {
			return f.Seal(t.Context(), "wal", "0", "b", 2)
		}},
		{"settle", func(f *writefence.Fence, s writefence.Settlement) error { return f.Settle(t.Context(), "wal", "0", s) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mem := &writefence.MemStore{}
			key := mustKey(t, "wal", "0")
			require.NoError(t, (&writefence.Fence{Store: mem}).Push(t.Context(), "wal", "0", "a", 1, []byte("a's")))
			store := fakestore.New(mem, fakestore.Options{Faults: []fakestore.Fault{{Op: fakestore.Put, Key: floorKey, Err: denied}}})
			s := settlement(&writefence.Fence{Store: mem})
			err := tt.call(&writefence.Fence{Store: store, KeepFloor: true}, s)
			require.ErrorIs(t, err, fs.ErrPermission)
			assert.Contains(t, err.Error(), "writefence: the record landed at epoch 2, but the floor was not raised to it: mem put "+floorKey+": permission denied")
			info, ierr := (&writefence.Fence{Store: mem}).Inspect(t.Context(), "wal", "0")
			require.NoError(t, ierr)
			assert.Equal(t, uint64(2), info.Epoch, "the record landed, as the error says")
			_, _, ferr := mem.Get(t.Context(), floorKey)
			require.ErrorIs(t, ferr, writefence.ErrNotFound, "no floor")

			require.NoError(t, tt.call(&writefence.Fence{Store: mem, KeepFloor: true}, s), "called again, it enters the floor")
			_, _, ferr = mem.Get(t.Context(), floorKey)
			require.NoError(t, ferr)
			assert.NotEmpty(t, bytesAt(t, mem, key))
		})
	}
}

// TestKeepFloorStoreTimeoutAfterTheRecordLanded: a floor's write that the
// store times out on its own (a client's deadline, the caller's ctx live)
// fails the Seal as any failure of the floor's write does, saying that
// the record landed; only the caller's ctx ending passes as it is.
func TestKeepFloorStoreTimeoutAfterTheRecordLanded(t *testing.T) {
	floorKey, err := keys.Floor("", "wal", "0")
	require.NoError(t, err)
	timeout := &writefence.StoreError{Op: "mem put", Key: floorKey, Err: context.DeadlineExceeded}
	ctx := hook.With(t.Context(), &hook.Hooks{Wait: func(context.Context, int, time.Duration) error { return nil }})
	mem := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "a", 1, []byte("a's")))
	store := fakestore.New(mem, fakestore.Options{Faults: []fakestore.Fault{{Op: fakestore.Put, Key: floorKey, Err: timeout}}})

	err = (&writefence.Fence{Store: store, KeepFloor: true, MaxAttempts: 2}).Seal(ctx, "wal", "0", "b", 2)
	require.NoError(t, ctx.Err())
	require.ErrorIs(t, err, context.DeadlineExceeded, "the store's error, reachable")
	assert.Contains(t, err.Error(), "writefence: the record landed at epoch 2, but the floor was not raised to it: ")
	info, err := (&writefence.Fence{Store: mem}).Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), info.Epoch, "the record landed, as the error says")
}
