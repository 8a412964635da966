package writefence_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
)

// The engine takes a record that is what the call's last failed write sent
// (byte for byte, or but for a horizon Collect raised) for that write,
// landed. These tests attack that rule: a record set back to those bytes,
// a record read as a head, a seal and a settle whose replies were lost.

// Promise 29: a write whose reply was lost, then another writer's write
// that this Fence sees, then the record set back to exactly what the
// call sent (a restore): the retry finds its own bytes, but below what
// the Fence saw since, and does not return nil; it writes nothing again.
// Also when the bytes set back carry a horizon Collect raised.
func TestPromise29_LostReplyThenSetBackToThisCallsBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		horizon bool // the record set back is the call's bytes with a horizon Collect raised
		fail    error
		want    error
	}{
		{"lost reply", false, fakestore.ErrLostReply, writefence.ErrOutcomeUnknown},
		{"lost reply, horizon raised", true, fakestore.ErrLostReply, writefence.ErrOutcomeUnknown},
		{"conflict hiding a landing", false, writefence.ErrConflict, writefence.ErrEpochRegressed},
		{"conflict hiding a landing, horizon raised", true, writefence.ErrConflict, writefence.ErrEpochRegressed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			clock := &fakeclock.Clock{}
			mem := &writefence.MemStore{Clock: clock.Now}
			other := &writefence.Fence{Store: mem}
			ref1 := putBlob(t, other, "a", 1, "one")
			require.NoError(t, other.Commit(ctx, "wal", "0", "a", 1, appendBlob(ref1)))
			ref2 := putBlob(t, other, "a", 2, "two")
			putBlob(t, other, "a", 2, "stray")
			clock.Advance(2 * time.Hour)
			key := mustKey(t, "wal", "0")

			var f *writefence.Fence
			store := &betweenStore{ConditionalStore: mem, key: key, fail: tc.fail, between: func() {
				if tc.horizon {
					_, err := other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
					require.NoError(t, err)
				}
				landed, _, err := mem.Get(ctx, key)
				require.NoError(t, err)
				// b takes the shard, and this Fence sees it.
				require.NoError(t, other.Seal(ctx, "wal", "0", "b", 3))
				e, _, _, err := f.Latest(ctx, "wal", "0")
				require.NoError(t, err)
				require.Equal(t, uint64(3), e)
				// A restore sets the record back to the call's write.
				_, v, err := mem.Get(ctx, key)
				require.NoError(t, err)
				_, err = mem.PutIfVersion(ctx, key, landed, v)
				require.NoError(t, err)
			}}
			counting := counted(store)
			f = &writefence.Fence{Store: counting, Blobs: mem}

			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, ref2)
				return m, nil
			})
			require.ErrorIs(t, err, tc.want, "the record went back below what the Fence saw: never nil")
			assert.Contains(t, err.Error(), "regressed")
			assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "nothing written again")
		})
	}
}

// A push of a payload larger than a record's head whose reply was lost:
// the retry reads the head, which cannot tell, then the whole record,
// which is byte for byte the push: nil, and no second write.
func TestLostReplyOfAPushLargerThanAHead(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	payload := bytes.Repeat([]byte("p"), 256<<10)
	require.NoError(t, (&writefence.Fence{Store: mem}).Push(ctx, "wal", "0", "a", 1, []byte("first")))
	counting := counted(mem, lostReplies(1))
	f := &writefence.Fence{Store: counting}
	dctx, stop := f.Deposed(ctx, "wal", "0")
	defer stop()
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 2, payload))
	require.NoError(t, dctx.Err())
	assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed push is not written again")
	e, w, p, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), e)
	assert.Equal(t, "a", w)
	assert.True(t, bytes.Equal(payload, p))
}

// A seal whose reply was lost, with a Collect raising the horizon before
// the retry reads: the seal landed (nil), starts its tenure at its epoch
// (promise 21), and under KeepFloor enters the floor (promise 31).
func TestLostReplyOfASealThenCollect(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := "plain"
		if keep {
			name = "KeepFloor"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			clock := &fakeclock.Clock{}
			mem := &writefence.MemStore{Clock: clock.Now}
			other := &writefence.Fence{Store: mem, KeepFloor: keep}
			require.NoError(t, other.Seal(ctx, "wal", "0", "a", 1))
			ref1 := putBlob(t, other, "a", 1, "one")
			require.NoError(t, other.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref1)))
			putBlob(t, other, "b", 3, "stray") // b's, of the tenure the seal begins
			clock.Advance(2 * time.Hour)

			store := &betweenStore{ConditionalStore: mem, key: mustKey(t, "wal", "0"), fail: fakestore.ErrLostReply, between: func() {
				_, err := other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
				require.NoError(t, err)
			}}
			counting := counted(store)
			f := &writefence.Fence{Store: counting, Blobs: mem, KeepFloor: keep}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()
			require.NoError(t, f.Seal(ctx, "wal", "0", "b", 3))
			require.NoError(t, dctx.Err())

			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(3), info.Epoch)
			assert.Equal(t, "b", info.Writer)
			assert.Equal(t, uint64(3), info.Since, "the seal's tenure begins at its epoch")
			assert.False(t, info.Horizon.IsZero(), "Collect raised the horizon in between")
			assert.Equal(t, []writefence.BlobRef{ref1}, info.Blobs)

			// a's blob of epoch 2 is below the seal's tenure: never newly
			// referenced again, by a or by b.
			late := putBlob(t, other, "a", 2, "late")
			require.Error(t, f.Commit(ctx, "wal", "0", "a", 4, appendBlob(late)))
			if keep {
				// The floor was entered: the record deleted, a push below
				// the seal is refused by a Fence that never saw the shard.
				require.NoError(t, mem.Delete(ctx, mustKey(t, "wal", "0")))
				fresh := &writefence.Fence{Store: mem, KeepFloor: true}
				require.Error(t, fresh.Push(ctx, "wal", "0", "z", 2, []byte("zombie")))
				_, _, err := mem.Get(ctx, mustKey(t, "wal", "0"))
				require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written below the floor")
			}
		})
	}
}

// Every write of a Settle has its reply lost once (the log's entry, the
// record, and under KeepFloor the floor): each is resolved by the next
// read, and the settle returns nil, having written each key once.
func TestLostReplyOfEveryWriteOfASettle(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := "plain"
		if keep {
			name = "KeepFloor"
		}
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			v := corruptRecord(t, mem)
			counting := counted(mem, lostReplies(3))
			f := &writefence.Fence{Store: counting, KeepFloor: keep}
			require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: v, Writer: "op", Epoch: 9, Payload: []byte("restored"), Floor: 3}))
			writes := int64(2)
			if keep {
				writes = 3
			}
			assert.Equal(t, writes, counting.Calls(fakestore.Put), "each key written once")
			requireLatest(t, f, 9, "op", "restored")
			// The same settle again: landed, nil, nothing written.
			require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: v, Writer: "op", Epoch: 9, Payload: []byte("restored"), Floor: 3}))
			assert.Equal(t, writes, counting.Calls(fakestore.Put))
			if keep {
				fresh := &writefence.Fence{Store: mem, KeepFloor: true}
				err := fresh.Seal(ctx, "wal", "0", "z", 9)
				require.ErrorIs(t, err, writefence.ErrStaleEpoch, "the floor is the settle's")
				assert.True(t, strings.Contains(err.Error(), "9"))
			}
		})
	}
}

// A commit that conflicts (a write below it landed first) and is retried,
// with a next that is not idempotent: next runs on the record the retry
// read, and the commit lands once, its blob referenced once.
func TestCommitConflictRetriedWithANonIdempotentNext(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	other := &writefence.Fence{Store: mem}
	ref1 := putBlob(t, other, "a", 1, "one")
	require.NoError(t, other.Commit(ctx, "wal", "0", "a", 1, appendBlob(ref1)))
	ref2 := putBlob(t, other, "a", 3, "two")
	gate := &fakestore.Gate{} // holds the commit's first write
	f := &writefence.Fence{Store: counted(mem, fakestore.Fault{Op: fakestore.Put, Times: 1, Gate: gate}), Blobs: mem}
	done := make(chan error, 1)
	go func() {
		done <- f.Commit(ctx, "wal", "0", "a", 3, func(m writefence.Manifest) (writefence.Manifest, error) {
			m.Blobs = append(m.Blobs, ref2)
			m.Payload = append(m.Payload, '+')
			return m, nil
		})
	}()
	<-gate.Arrived()
	require.NoError(t, other.Push(ctx, "wal", "0", "a", 2, []byte("rival")))
	gate.Open()
	require.NoError(t, <-done)
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), info.Epoch)
	assert.Equal(t, "rival+", string(info.Payload), "next ran on the record the retry read")
	assert.Equal(t, []writefence.BlobRef{ref1, ref2}, info.Blobs)
}

// Promise 11 and a lost reply: a claim whose create landed but whose reply
// was lost finds the identity on its next read, and returns false and nil
// (it cannot tell its own create from another claimer's of the same
// identity, so it never reports a claim twice); a claimer of another
// identity is refused.
func TestClaimBrandLostReply(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	lost := counted(mem, lostReplies(1))
	claimed, err := (&writefence.Fence{Store: lost}).ClaimBrand(ctx)
	require.NoError(t, err)
	assert.False(t, claimed)
	require.NoError(t, (&writefence.Fence{Store: mem}).VerifyBrand(ctx), "the brand landed")
	claimed, err = (&writefence.Fence{Store: mem}).ClaimBrand(ctx)
	require.NoError(t, err)
	assert.False(t, claimed)
	_, err = (&writefence.Fence{Store: mem, Identity: "other/v1"}).ClaimBrand(ctx)
	require.ErrorIs(t, err, writefence.ErrWire)
}
