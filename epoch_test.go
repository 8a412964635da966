package writefence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

func TestPushFrom(t *testing.T) {
	ctx := context.Background()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	epoch, err := f.PushFrom(ctx, writefence.StaticEpochSource(4), "wal", "0", "a", []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, uint64(4), epoch)
	requireLatest(t, f, 4, "a", "x")

	_, err = f.PushFrom(ctx, writefence.StaticEpochSource(4), "wal", "0", "b", []byte("y"))
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)

	_, err = f.PushFrom(ctx, writefence.StaticEpochSource(0), "wal", "0", "a", []byte("x"))
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)

	errNoLease := errors.New("lease not held")
	src := epochFunc(func(context.Context, string, string) (uint64, error) { return 0, errNoLease })
	_, err = f.PushFrom(ctx, src, "wal", "0", "a", []byte("x"))
	require.ErrorIs(t, err, errNoLease)
	_, err = f.PushFrom(ctx, nil, "wal", "0", "a", []byte("x"))
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	requireLatest(t, f, 4, "a", "x")
}
