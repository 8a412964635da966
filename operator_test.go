package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/testserver"
)

func TestInspect(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem}

	_, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, []byte("abc")))
	_, version, err := mem.Get(ctx, mustKey(t, "wal", "0"))
	require.NoError(t, err)
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, writefence.RecordInfo{Key: mustKey(t, "wal", "0"), Version: version, Identity: defaults.Identity,
		Epoch: 3, Writer: "a", Payload: []byte("abc")}, info)

	// A record of another identity is described, and refused.
	info, err = (&writefence.Fence{Store: mem, Identity: "other"}).Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrWire)
	assert.Equal(t, defaults.Identity, info.Identity)
	assert.Equal(t, uint64(3), info.Epoch)
}

// TestSettle: a corrupt record is replaced only by Settle, only at exactly
// the version found corrupt, and only while it is still corrupt.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	mem, counting, f := countedFence()
	key := mustKey(t, "wal", "0")

	err := f.Settle(ctx, "wal", "0", writefence.Settlement{Version: "1", Writer: "op", Epoch: 9, Payload: []byte("restored")})
	require.ErrorIs(t, err, writefence.ErrNotFound)

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, []byte("good")))
	_, good, err := mem.Get(ctx, key)
	require.NoError(t, err)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: good, Writer: "op", Epoch: 9, Payload: []byte("restored")})
	require.ErrorIs(t, err, writefence.ErrInvalidArgument, "a sound record is not settled")

	bad, err := mem.PutIfVersion(ctx, key, []byte("garbage"), good)
	require.NoError(t, err)
	_, err = f.Inspect(ctx, "wal", "0")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, bad, ce.Version)

	puts := counting.Calls(fakestore.Put)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: good, Writer: "op", Epoch: 9, Payload: []byte("restored")})
	require.ErrorIs(t, err, writefence.ErrConflict, "only the version found corrupt")
	require.ErrorIs(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: bad, Writer: "op", Epoch: 0, Payload: nil}), writefence.ErrInvalidArgument)
	require.ErrorIs(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: "", Writer: "op", Epoch: 9, Payload: nil}), writefence.ErrInvalidArgument)
	assert.Equal(t, puts, counting.Calls(fakestore.Put), "refusals write nothing")

	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: ce.Version, Writer: "op", Epoch: 9, Payload: []byte("restored")})
	require.ErrorIs(t, err, writefence.ErrInvalidArgument, "no epoch can be read from garbage: the floor must be stated")
	assert.Equal(t, puts, counting.Calls(fakestore.Put), "refusals write nothing")
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: ce.Version, Writer: "op", Epoch: 9, Payload: []byte("restored"), Floor: 3}))
	requireLatest(t, f, 9, "op", "restored")
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 10, []byte("next")), "pushes resume after settling")
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: ce.Version, Writer: "op", Epoch: 11, Payload: nil})
	require.ErrorIs(t, err, writefence.ErrInvalidArgument, "settled once: nothing left to settle")
}

// TestPromise9_SettleKeepsManyReferencesOnTheDirectoryStore: a stream's
// manifest on the directory store whose payload is damaged in place, its
// header and every reference intact, is settled keeping every reference
// (promise 9: "Settle keeps the blobs the damaged record references when
// its references decode"). A shard with enough segments that its
// references pass the first 4 KiB of the record must not be treated as
// one whose references cannot be read: that would leave the operator
// only DropBlobs, which loses every segment.
func TestPromise9_SettleKeepsManyReferencesOnTheDirectoryStore(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	f := &writefence.Fence{Store: newDirStore(t, dir)}

	const segments = 80 // about 65 bytes of reference each: more than 4 KiB
	var refs []writefence.BlobRef
	for i := range segments {
		refs = append(refs, putBlob(t, f, "a", 1, fmt.Sprintf("segment %d", i)))
	}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Payload, m.Blobs = []byte("manifest"), refs
		return m, nil
	}))

	// One bit of the payload, the record's last byte, flips on disk.
	require.NoError(t, testserver.DamageDir(dir)(ctx, mustKey(t, "wal", "0"), testserver.Fault{Flip: -1}))

	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	require.Equal(t, uint64(2), info.Epoch, "the header is intact")
	assert.Len(t, info.Blobs, segments, "the references are intact, and Inspect shows what a settle keeps")

	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 3, Payload: []byte("settled")})
	require.NoError(t, err, "the references decode: the settle keeps them")
	after, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.ElementsMatch(t, refs, after.Blobs)
}

// TestPromise6_SettleRetriesAThrottledRead: a Settle is a write of a
// record, and a transient failure of a read it makes (here, the look at
// the shard's blobs that decides whether references may be lost) is
// retried after a back-off (promise 6), not the end of the settle.
func TestPromise6_SettleRetriesAThrottledRead(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	blobs := fakestore.New(mem, fakestore.Options{})
	f := &writefence.Fence{Store: mem, Blobs: blobs, RetryDelay: time.Microsecond}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("payload")))
	version := damageRecord(t, mem)

	blobs.Inject(throttled(fakestore.ListBlobs, 1))
	err := f.Settle(ctx, "wal", "0", writefence.Settlement{Version: version, Writer: "op", Epoch: 2, Payload: []byte("settled")})
	require.NoError(t, err, "one 503 is retried")
	assert.Equal(t, int64(2), blobs.Calls(fakestore.ListBlobs), "the throttled read, then its retry")
}

// damageRecord overwrites the shard's record with its payload's last byte
// flipped, as a program writing the object directly would, and returns
// the version of the damaged bytes.
func damageRecord(t *testing.T, mem *writefence.MemStore) string {
	t.Helper()
	require.NoError(t, testserver.DamageByOverwrite(mem)(t.Context(), mustKey(t, "wal", "0"), testserver.Fault{Flip: -1}))
	_, v, err := mem.Get(t.Context(), mustKey(t, "wal", "0"))
	require.NoError(t, err)
	return v
}

// TestPromise10_NoWriteOnAStoreOfAnotherIdentity: a Fence whose store is
// branded for another program writes nothing there, not even a blob of
// its reserved space: a Collect and a Settle that the brand refuses
// create no blob in that store first (promises 3 and 10).
func TestPromise10_NoWriteOnAStoreOfAnotherIdentity(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode writefence.BrandMode
		call func(ctx context.Context, f *writefence.Fence) error
	}{
		{"collect, brand verified on every write", writefence.BrandVerifyAlways, func(ctx context.Context, f *writefence.Fence) error {
			_, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{})
			return err
		}},
		{"settle dropping blobs, brand verified once", writefence.BrandVerify, func(ctx context.Context, f *writefence.Fence) error {
			return f.Settle(ctx, "wal", "0", writefence.Settlement{Version: "1", Writer: "op", Epoch: 2, DropBlobs: true})
		}},
		{"settle dropping blobs, brand verified on every write", writefence.BrandVerifyAlways, func(ctx context.Context, f *writefence.Fence) error {
			return f.Settle(ctx, "wal", "0", writefence.Settlement{Version: "1", Writer: "op", Epoch: 2, DropBlobs: true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			other := &writefence.Fence{Store: mem, Identity: "other/v1"}
			_, err := other.ClaimBrand(ctx)
			require.NoError(t, err)
			blobs := fakestore.New(mem, fakestore.Options{ByKey: true})
			f := &writefence.Fence{Store: mem, Blobs: blobs, Brand: tc.mode}

			err = tc.call(ctx, f)
			require.Error(t, err, "refused: the store is another program's")
			assert.Zero(t, blobs.Calls(fakestore.CreateBlob), "a blob was created in a store branded for another identity: %s", strings.Join(blobs.Keys(fakestore.CreateBlob), ", "))
		})
	}
}

// TestPromise27_ObserverSeesASettleThatFailsOnItsBlobs: the Observer sees
// every write once when it ends (promise 27), a settle too, whatever ends
// it: one whose read of the record fails is seen as a settle, and so must
// be one that fails on its look at the shard's blobs, before it reads the
// record.
func TestPromise27_ObserverSeesASettleThatFailsOnItsBlobs(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	blobs := fakestore.New(mem, fakestore.Options{})
	var events []writefence.WriteEvent
	f := &writefence.Fence{Store: mem, Blobs: blobs, MaxAttempts: 1, Observer: func(_ context.Context, e writefence.WriteEvent) {
		events = append(events, e)
	}}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("payload")))
	version := damageRecord(t, mem)
	events = nil

	blobs.Inject(throttled(fakestore.ListBlobs, 0))
	err := f.Settle(ctx, "wal", "0", writefence.Settlement{Version: version, Writer: "op", Epoch: 2, Payload: []byte("settled")})
	require.Error(t, err)
	require.Len(t, events, 1, "the settle's end is seen once")
	assert.Equal(t, "settle", events[0].Op)
	assert.Error(t, events[0].Err)
}

// TestPromise6_SettleRetriesAThrottledBrandRead: under BrandVerifyAlways a
// settle that drops its blobs reads the brand before the blob store's
// clock; a transient failure of that read is retried (promise 6), not the
// end of the settle.
func TestPromise6_SettleRetriesAThrottledBrandRead(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	s := fakestore.New(mem, fakestore.Options{ByKey: true})
	f := &writefence.Fence{Store: s, Brand: writefence.BrandVerifyAlways, RetryDelay: time.Microsecond}
	_, err := f.ClaimBrand(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("payload")))
	version := damageRecord(t, mem)

	fault := throttled(fakestore.Get, 1)
	fault.Key = brandKey
	s.Inject(fault)
	reads := s.Calls(fakestore.Get, brandKey)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: version, Writer: "op", Epoch: 2, Payload: []byte("settled"), DropBlobs: true})
	require.NoError(t, err, "one 503 is retried")
	assert.GreaterOrEqual(t, s.Calls(fakestore.Get, brandKey)-reads, int64(2), "the throttled read, then its retry")
	requireLatest(t, &writefence.Fence{Store: mem}, 2, "op", "settled")
}

// TestSettleNeverLowersAReadableEpoch: a record whose payload is damaged
// under an intact header still names its epoch; settling below it would
// let a deposed writer at the old epoch land afterwards.
func TestSettleNeverLowersAReadableEpoch(t *testing.T) {
	ctx := t.Context()
	mem, counting, f := countedFence()
	require.NoError(t, f.Push(ctx, "wal", "0", "leader", 11, []byte("segment 11")))
	bad := damagePayload(t, mem)

	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, uint64(11), info.Epoch, "Inspect shows the header's epoch")
	assert.Equal(t, "leader", info.Writer)
	assert.Equal(t, bad, info.Version)

	puts := counting.Calls(fakestore.Put)
	for _, epoch := range []uint64{6, 11} {
		err := f.Settle(ctx, "wal", "0", writefence.Settlement{Version: bad, Writer: "op", Epoch: epoch, Payload: []byte("restored")})
		var se *writefence.StaleEpochError
		require.ErrorAs(t, err, &se, "settle at %d", epoch)
		assert.Equal(t, uint64(11), se.RecordedEpoch)
		assert.Equal(t, "leader", se.RecordedWriter)
	}
	assert.Equal(t, puts, counting.Calls(fakestore.Put), "a refused settle writes nothing")

	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: bad, Writer: "op", Epoch: 12, Payload: []byte("restored")}))
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "leader", 11, []byte("late")), writefence.ErrStaleEpoch,
		"the deposed writer at the old epoch stays fenced")
	requireLatest(t, f, 12, "op", "restored")
}

// TestSettleRefusesAnotherIdentity: a corrupt record whose header names
// another wire identity is not replaced: the program that settles it does
// not speak its format.
func TestSettleRefusesAnotherIdentity(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	other := &writefence.Fence{Store: mem, Identity: "other-format/v9"}
	require.NoError(t, other.Push(ctx, "wal", "0", "them", 5, []byte("their payload")))
	damagePayload(t, mem)
	f := &writefence.Fence{Store: mem}
	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, "other-format/v9", info.Identity)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 6, Payload: []byte("ours")})
	requireWire(t, err, writefence.WireError{Key: mustKey(t, "wal", "0"), Expected: defaults.Identity, Found: "other-format/v9"})
	_, v, err := mem.Get(ctx, mustKey(t, "wal", "0"))
	require.NoError(t, err)
	assert.Equal(t, info.Version, v, "nothing written")
}

// TestSettleRerunOverSameDamage: push at 5, the record emptied, settled at
// 10, pushed at 20, emptied again: the same settle run again is refused,
// though the damaged bytes (and, on a store whose versions name bytes,
// their version) are the same; the epoch never goes from 20 to 10.
func TestSettleRerunOverSameDamage(t *testing.T) {
	ctx := t.Context()
	s := &contentVersioned{}
	f := &writefence.Fence{Store: s}
	key := mustKey(t, "wal", "0")
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 5, []byte("five")))
	s.raw(key, nil)
	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	settle := writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 10, Payload: []byte("ten"), Floor: 5}
	require.NoError(t, f.Settle(ctx, "wal", "0", settle))
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 20, []byte("twenty")))
	s.raw(key, nil)
	again, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	require.Equal(t, info.Version, again.Version, "the same damage has the same version on this store")

	err = f.Settle(ctx, "wal", "0", settle)
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, writefence.StaleEpochError{Op: "settle", Key: "writefence/_settled/wal/0", Epoch: 10, RecordedEpoch: 10, RecordedWriter: "op"}, *stale,
		"the settle log refuses it, under the refused call's name")
	_, v, err := s.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, info.Version, v, "nothing written")
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 21, Payload: []byte("21"), Floor: 20}))
	requireLatest(t, f, 21, "op", "21")
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

// TestSettleClockDeleteRetriedOnce: Settle with DropBlobs reads the blob
// store's clock; a delete of the clock's blob that keeps failing is tried
// MaxAttempts times, once over, not once per attempt of the whole clock,
// and the settle writes nothing.
func TestSettleClockDeleteRetriedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := &writefence.MemStore{}
		s := fakestore.New(mem, fakestore.Options{Faults: []fakestore.Fault{
			{Op: fakestore.DeleteBlob, Err: errors.New("connection reset")},
		}})
		f := &writefence.Fence{Store: s, MaxAttempts: 4}
		err := f.Settle(ctx, "wal", "0", writefence.Settlement{Lost: true, Writer: "op", Floor: 1, Epoch: 2, DropBlobs: true})
		require.Error(t, err)
		assert.EqualValues(t, 4, s.Calls(fakestore.DeleteBlob))
		assert.EqualValues(t, 1, s.Calls(fakestore.CreateBlob))
		_, _, err = mem.Get(ctx, mustKey(t, "wal", "0"))
		require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written")
	})
}

// TestSettleConflictAfterItsLogEntry: Settle enters the settle log, then
// writes the record at the version it read. Damage rewritten in between
// (here: while the log entry is written) makes it return ErrConflict with
// the entry in place, as its doc says; a settle of the new damage at that
// epoch is then refused as stale, and one above it lands.
func TestSettleConflictAfterItsLogEntry(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	key := mustKey(t, "wal", "0")
	logKey := "writefence/_settled/wal/0"
	v1, err := mem.PutIfVersion(ctx, key, []byte("garbage"), "")
	require.NoError(t, err)

	var once sync.Once
	s := fakestore.New(mem, fakestore.Options{Before: func(ctx context.Context, c fakestore.Call) error {
		if c.Op == fakestore.Put && c.Key == logKey {
			once.Do(func() {
				_, err := mem.PutIfVersion(ctx, key, []byte("other garbage"), v1)
				require.NoError(t, err)
			})
		}
		return nil
	}})
	f := &writefence.Fence{Store: s}
	settle := writefence.Settlement{Version: v1, Writer: "op", Epoch: 10, Payload: []byte("ten"), Floor: 5}
	err = f.Settle(ctx, "wal", "0", settle)
	require.ErrorIs(t, err, writefence.ErrConflict)

	_, _, err = mem.Get(ctx, logKey)
	require.NoError(t, err, "the settle log's entry stays")

	_, v2, err := mem.Get(ctx, key)
	require.NoError(t, err)
	settle.Version = v2
	require.ErrorIs(t, f.Settle(ctx, "wal", "0", settle), writefence.ErrStaleEpoch, "the new damage, settled at the logged epoch")
	settle.Epoch = 11
	require.NoError(t, f.Settle(ctx, "wal", "0", settle), "the new damage, settled above it")
	e, w, p, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []any{uint64(11), "op", "ten"}, []any{e, w, string(p)})
}
