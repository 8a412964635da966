package writefence_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// TestPromise20_CommitChecksAReferenceReplacedInPlace: a commit whose
// manifest function replaces a reference where it stands (compaction:
// m.Blobs[i] = merged, as Go code edits a slice it was handed) newly
// references the replacement, and lands only if that blob exists, with its
// size, was written by the committing writer within its tenure, and after
// the collection horizon (promise 20). Otherwise the recorded manifest
// references a blob that does not exist (promise 24), and OpenBlob of it
// reports damage.
func TestPromise20_CommitChecksAReferenceReplacedInPlace(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		ref  writefence.BlobRef
		want error
	}{
		{"a blob that was never written", writefence.BlobRef{Name: keys.BlobName(2, "a", strings.Repeat("0", 32)), Size: 7, CRC: 1}, writefence.ErrNotFound},
		{"another writer's blob", writefence.BlobRef{Name: keys.BlobName(2, "zombie", strings.Repeat("1", 32)), Size: 7, CRC: 1}, writefence.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			first := putBlob(t, f, "a", 1, "segment 1")
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, appendBlob(first)))

			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs[0] = tc.ref // replace the one segment where it stands
				return m, nil
			})
			require.ErrorIs(t, err, tc.want, "the replacement is newly referenced and checked")

			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, []writefence.BlobRef{first}, info.Blobs, "the recorded manifest still references only blobs that exist")
			for _, r := range info.Blobs {
				_, err := readBlob(t, f, r.Name)
				assert.NoError(t, err, "every referenced blob exists")
			}
		})
	}
}

// TestPromise22_PushKeepsTheRecordedReferences: a push keeps the
// references of the record it replaces (promise 22), the ones the store
// holds. A writer that builds its manifests in a buffer of its own, hands
// it to Commit and later reuses the buffer for its next manifest has not
// changed the record: the push that follows the commit, which the Fence
// conditions on the version it remembers without reading, must still
// carry the recorded references, not what the buffer holds now.
func TestPromise22_PushKeepsTheRecordedReferences(t *testing.T) {
	ctx := t.Context()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	first := putBlob(t, f, "a", 1, "segment 1")
	buf := []writefence.BlobRef{first}
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = buf
		return m, nil
	}))

	// The writer starts its next manifest in the same buffer.
	buf[0] = writefence.BlobRef{Name: keys.BlobName(3, "a", strings.Repeat("2", 32)), Size: 1, CRC: 1}

	require.NoError(t, f.Push(ctx, "wal", "0", "a", 3, []byte("checkpoint")))
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []writefence.BlobRef{first}, info.Blobs, "the push keeps the references the store recorded")
	_, err = readBlob(t, f, info.Blobs[0].Name)
	assert.NoError(t, err, "every referenced blob exists (promise 24)")
}
