package writefence_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
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
