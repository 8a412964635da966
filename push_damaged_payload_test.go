package writefence_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestPushNeverOverwritesDamagedPayload: on a store that reads prefixes
// but does not check damage itself (S3, GCS, any PrefixReader), a record
// whose payload was damaged past its intact header is never overwritten by
// a Push: the Push reads the header first, and before it replaces the
// record it reads and checks all of it, so it refuses with ErrCorrupt, as
// Latest does.
func TestPushNeverOverwritesDamagedPayload(t *testing.T) {
	ctx := context.Background()
	store := &prefixMemStore{}
	f := &writefence.Fence{Store: store}
	payload := bytes.Repeat([]byte("x"), 3*4096)
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, payload))

	key := mustKey(t, "wal", "0")
	data, v, err := store.Get(ctx, key)
	require.NoError(t, err)
	data[len(data)-1] ^= 1 // damage from outside, past the header
	_, err = store.PutIfVersion(ctx, key, data, v)
	require.NoError(t, err)
	_, _, _, err = (&writefence.Fence{Store: store}).Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt, "the record is corrupt")

	err = (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("over it"))
	require.ErrorIs(t, err, writefence.ErrCorrupt, "a Push overwrote a record Latest calls corrupt")
}

// prefixMemStore is MemStore with a PrefixReader of its own, as S3 and GCS
// have: the first n bytes, the size and the version from one read.
type prefixMemStore struct{ writefence.MemStore }

func (s *prefixMemStore) Capabilities() writefence.ConditionalStore { return s }

func (s *prefixMemStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	data, v, err := s.Get(ctx, key)
	if err != nil {
		return nil, 0, "", err
	}
	return data[:min(int64(len(data)), n)], int64(len(data)), v, nil
}
