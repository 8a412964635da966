package writefence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
)

// betweenStore performs the first write of key, then runs between (another
// process's call, while the reply is on its way), then answers the write
// with fail instead of its result: a reply lost, or a conflict for a write
// that happened (outside ConditionalStore's contract, which says a
// conflict wrote nothing, but what store_gcs.go says a client that
// retried a landed write would answer, and what the engine's
// snapshot.sent names).
type betweenStore struct {
	writefence.ConditionalStore
	key     string
	fail    error
	between func()
	once    sync.Once
}

func (s *betweenStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	if key != s.key || err != nil {
		return v, err
	}
	hit := false
	s.once.Do(func() { hit = true })
	if !hit {
		return v, err
	}
	s.between()
	return "", s.fail
}

// Promise 5 (and 3, 18): a commit or an update whose next is not
// idempotent, whose write landed but whose reply was lost, is resolved by
// the call's next read even when a Collect raised the record's collection
// horizon in between. The horizon write changes nothing else in the
// record (promise 1): the record still holds this call's epoch, writer,
// payload and references, so the call returns nil, deposes nobody, and
// writes nothing again. Before the fix, the record was no longer byte for
// byte what the call sent, and next, asked again, appended again: the call
// ended as if another write had taken the shard (ErrOutcomeUnknown after a
// lost reply; ErrStaleEpoch, deposing the writer, after a conflict that hid
// the landing).
func TestLostReplyThenCollectRaisesTheHorizon(t *testing.T) {
	for _, fail := range []struct {
		name string
		err  error
	}{
		{"lost reply", fakestore.ErrLostReply},
		{"conflict hiding a landing", writefence.ErrConflict},
	} {
		t.Run(fail.name+"/commit", func(t *testing.T) {
			ctx := t.Context()
			clock := &fakeclock.Clock{}
			mem := &writefence.MemStore{Clock: clock.Now}
			other := &writefence.Fence{Store: mem}
			ref1 := putBlob(t, other, "a", 1, "one")
			require.NoError(t, other.Commit(ctx, "wal", "0", "a", 1, appendBlob(ref1)))
			ref2 := putBlob(t, other, "a", 2, "two")
			stray := putBlob(t, other, "a", 2, "stray") // never committed: Collect raises the horizon over it
			clock.Advance(2 * time.Hour)

			var collected writefence.GCReport
			store := &betweenStore{ConditionalStore: mem, key: mustKey(t, "wal", "0"), fail: fail.err, between: func() {
				var err error
				collected, err = other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
				require.NoError(t, err)
			}}
			counting := counted(store)
			f := &writefence.Fence{Store: counting, Blobs: mem}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()

			// Not idempotent: each call appends, as the package's stream
			// example does.
			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, ref2)
				return m, nil
			})
			require.Len(t, collected.Deleted, 1, "the Collect in between deleted the stray blob")
			assert.Contains(t, collected.Deleted[0].Key, stray.Name)
			require.NoError(t, err, "the commit landed; the horizon Collect raised since changes nothing else")
			require.NoError(t, dctx.Err(), "a commit that landed deposes nobody")
			assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed commit is not written again")
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(2), info.Epoch)
			assert.Equal(t, []writefence.BlobRef{ref1, ref2}, info.Blobs)
		})
		t.Run(fail.name+"/update", func(t *testing.T) {
			ctx := t.Context()
			clock := &fakeclock.Clock{}
			mem := &writefence.MemStore{Clock: clock.Now}
			other := &writefence.Fence{Store: mem}
			require.NoError(t, other.Push(ctx, "wal", "0", "a", 1, []byte("x")))
			putBlob(t, other, "a", 2, "stray") // Collect raises the horizon over it
			clock.Advance(2 * time.Hour)

			store := &betweenStore{ConditionalStore: mem, key: mustKey(t, "wal", "0"), fail: fail.err, between: func() {
				_, err := other.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
				require.NoError(t, err)
			}}
			counting := counted(store)
			f := &writefence.Fence{Store: counting}
			dctx, stop := f.Deposed(ctx, "wal", "0")
			defer stop()

			err := f.Update(ctx, "wal", "0", "a", 2, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil })
			require.NoError(t, err, "the update landed; the horizon Collect raised since changes nothing else")
			require.NoError(t, dctx.Err(), "an update that landed deposes nobody")
			assert.Equal(t, int64(1), counting.Calls(fakestore.Put), "the landed update is not written again")
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.False(t, info.Horizon.IsZero(), "Collect raised the horizon in between")
			requireLatest(t, f, 2, "a", "x+")
		})
	}
}
