package writefence_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// Breaks promise 3 as stated (a corrupt record is overwritten only by a
// Settle of exactly that damage, on every store and every path) and SPEC
// §2 ("never overwritten by a push"), by the default Push path: on a store
// that reads prefixes but does not check damage itself (S3, GCS, and any
// PrefixReader), Push reads only the first 4 KiB, so a record whose payload
// was damaged past its intact header is overwritten by the next Push at a
// higher epoch, although Latest and Inspect call it corrupt. The package
// documents this as the header path's limit (Fence.VerifyPayloadOnPush);
// this test states the promise as the brief gives it, so the trade-off is
// a decision on record rather than a silent one.
//
// Sequence: a prefix-reading store; Push a record larger than one header
// read; flip one payload byte from outside (a new version, as on S3);
// Latest says ErrCorrupt; Push at a higher epoch is expected to refuse
// with ErrCorrupt; it lands.
func TestAttackHeadPushOverwritesCorruptPayload(t *testing.T) {
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
