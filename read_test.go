package writefence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// newPrefixStore returns an in-memory store with a PrefixReader of its
// own, as S3 and GCS have: the first n bytes, the size and the version
// from one read. Its BytesRead counts what its reads return, as a ranged
// GET would transfer it.
func newPrefixStore() fakestore.Store {
	mem := &writefence.MemStore{}
	return fakestore.New(mem, fakestore.Options{GetPrefix: fakestore.GetPrefixOf(mem)})
}

// TestColdPushReadsHeaderOnly: over a 16 MiB record, a fresh fence's
// push reads at most MaxHeaderSize bytes, whether it is refused as stale
// or replaces the record.
func TestColdPushReadsHeaderOnly(t *testing.T) {
	ctx := context.Background()
	store := newPrefixStore()
	big := make([]byte, 16<<20)
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 1, big))

	read := store.BytesRead()
	err := (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "c", 1, big)
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	assert.LessOrEqual(t, store.BytesRead()-read, int64(defaults.MaxHeaderSize))
	t.Logf("a stale cold push over a 16 MiB record read %d bytes", store.BytesRead()-read)

	read = store.BytesRead()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, big))
	assert.LessOrEqual(t, store.BytesRead()-read, int64(defaults.MaxHeaderSize), "the record replaced was read by its head")
	t.Logf("a cold push over a 16 MiB record read %d bytes", store.BytesRead()-read)
	requireLatest(t, &writefence.Fence{Store: store}, 2, "b", string(big))
}

// TestColdPushOverManyReferences: a cold push over a stream's record whose
// references run past one header read reads the header and the
// references, in a second ranged read, and not the payload; it keeps the
// references, the tenure floor and the horizon.
func TestColdPushOverManyReferences(t *testing.T) {
	ctx := context.Background()
	store, f, payload := manyReferences(t)
	before, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	data, _, err := store.Unwrap().Get(ctx, mustKey(t, "wal", "0"))
	require.NoError(t, err)
	head := len(data) - len(payload)
	require.Greater(t, head, defaults.MaxHeaderSize, "the references run past one header read")

	read := store.BytesRead()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 2, []byte("pushed")))
	assert.Equal(t, int64(defaults.MaxHeaderSize+head), store.BytesRead()-read, "one header read, then the header and the references")

	after, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), after.Epoch)
	assert.Equal(t, "pushed", string(after.Payload))
	assert.Equal(t, before.Blobs, after.Blobs, "the references are kept")
	assert.Equal(t, before.Horizon, after.Horizon)
}

// manyReferences returns a store holding a stream's record of a 1 MiB
// payload whose 200 references run past one header read, committed by
// writer "a" at epoch 1 through the Fence returned, and the payload.
func manyReferences(t *testing.T) (fakestore.Store, *writefence.Fence, []byte) {
	t.Helper()
	ctx := t.Context()
	store := newPrefixStore()
	f := &writefence.Fence{Store: store}
	var refs []writefence.BlobRef
	for i := range 200 {
		ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader(fmt.Sprint("segment ", i)))
		require.NoError(t, err)
		refs = append(refs, ref)
	}
	payload := make([]byte, 1<<20)
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, func(writefence.Manifest) (writefence.Manifest, error) {
		return writefence.Manifest{Payload: payload, Blobs: refs}, nil
	}))
	return store, f, payload
}

// TestColdPushOverDamagedReferences: a cold push over a stream's record
// whose references, past one header read, were damaged under an intact
// header (written whole from outside, a new version) fails closed: the
// second ranged read brings the references, their check fails, and the
// push refuses with ErrCorrupt, writing nothing.
func TestColdPushOverDamagedReferences(t *testing.T) {
	ctx := context.Background()
	store, _, payload := manyReferences(t)
	key := mustKey(t, "wal", "0")
	data, v, err := store.Unwrap().Get(ctx, key)
	require.NoError(t, err)
	head := len(data) - len(payload)
	require.Greater(t, head, defaults.MaxHeaderSize+1, "the references run past one header read")
	damaged := append([]byte(nil), data...)
	damaged[defaults.MaxHeaderSize+1] ^= 1 // a reference's byte, past the first read
	v, err = store.PutIfVersion(ctx, key, damaged, v)
	require.NoError(t, err)

	err = (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, []byte("pushed"))
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	after, v2, err := store.Unwrap().Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, damaged, after, "the refusal wrote nothing")
	assert.Equal(t, v, v2)
}

// TestHeaderPathCorruption: reading the header alone still refuses every
// corruption that shows in the header or in the record's size.
func TestHeaderPathCorruption(t *testing.T) {
	ctx := context.Background()
	for name, rec := range corruptions(t) {
		t.Run(name, func(t *testing.T) {
			store := newPrefixStore()
			_, err := store.PutIfVersion(ctx, mustKey(t, "wal", "0"), rec, "")
			require.NoError(t, err)
			err = (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 1000, []byte("new"))
			require.ErrorIs(t, err, writefence.ErrCorrupt)
		})
	}

	// A large record cut short or extended is caught from its size alone.
	store := newPrefixStore()
	f := &writefence.Fence{Store: store}
	payload := make([]byte, 3*defaults.MaxHeaderSize)
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, payload))
	key := mustKey(t, "wal", "0")
	good, v, err := store.Get(ctx, key)
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"truncated payload": good[:len(good)-1],
		"trailing bytes":    append(append([]byte(nil), good...), 0),
	} {
		v2, err := store.PutIfVersion(ctx, key, bad, v)
		require.NoError(t, err)
		err = (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 2, nil)
		var ce *writefence.CorruptError
		require.ErrorAs(t, err, &ce, name)
		assert.Equal(t, name, ce.Check)
		assert.Equal(t, v2, ce.Version)
		v = v2
	}

	// A payload byte damaged under an intact header of a record larger
	// than one header read, written whole from outside (a new version,
	// as on S3): Latest and a stale push refuse it; a push above it
	// decides on the head, which is sound, and replaces it (see the
	// package documentation, "Damage").
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 1
	v, err = store.PutIfVersion(ctx, key, flipped, v)
	require.NoError(t, err)
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	err = (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 1, nil)
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	after, v2, err := store.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, flipped, after, "a refusal leaves the damage as it is")
	assert.Equal(t, v, v2)
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "b", 3, []byte("over it")))
	requireLatest(t, f, 3, "b", "over it")
}

// TestFormatVersion1Records: records written in format version 1 are read,
// replayed and pushed over; what a Fence writes is version 2.
func TestFormatVersion1Records(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	key, err := keys.Shard("", "wal", "0")
	require.NoError(t, err)
	_, err = mem.PutIfVersion(ctx, key, record.EncodeV1(defaults.Identity, "a", 5, []byte("old format")), "")
	require.NoError(t, err)

	f := &writefence.Fence{Store: mem}
	epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(5), epoch)
	assert.Equal(t, "a", writer)
	assert.Equal(t, "old format", string(payload))
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 5, []byte("old format")), "a replay of a version 1 record")
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "b", 5, []byte("x")), writefence.ErrStaleEpoch)
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 6, []byte("new format")))
	data, _, err := mem.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, byte(2), data[4], "format version written")
}
