package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestTenureFloorKeptWhenManifestEmpties: a shard's record stays a stream's
// record (format version 3) once it was one, so a manifest that drops its
// last reference keeps the tenure floor rising, and a blob a deposed
// writer uploads after its successor's seal can never be committed.
//
// Sequence: a commits at epoch 1 a manifest referencing its blob (since
// 0, the shard's first tenure); at epoch 2 a drops its references (by
// Commit, or by a plain Push); b seals at epoch 3; a, deposed but still
// running at epoch 2, uploads a blob after b's seal, and its commit at
// epoch 2 is refused as stale; a later seals at epoch 4 and commits its
// epoch-2 blob at epoch 5. Want: since 3 after b's seal, 4 after a's, and
// the commit refused with ErrInvalidArgument, as in the control subtest
// where a's manifest keeps a blob.
func TestTenureFloorKeptWhenManifestEmpties(t *testing.T) {
	cases := map[string]func(t *testing.T, f *writefence.Fence){
		"a's manifest still references a blob (control)": func(t *testing.T, f *writefence.Fence) {
			a2 := putBlob(t, f, "a", 2, "a's compaction")
			require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("compacted"), Blobs: []writefence.BlobRef{a2}}, nil
			}))
		},
		"a commits a manifest of no blobs": func(t *testing.T, f *writefence.Fence) {
			require.NoError(t, f.Commit(t.Context(), "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				return writefence.Manifest{Payload: []byte("compacted")}, nil
			}))
		},
		"a pushes over its manifest": func(t *testing.T, f *writefence.Fence) {
			require.NoError(t, f.Push(t.Context(), "wal", "0", "a", 2, []byte("compacted")))
		},
	}
	for name, aStep := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			a1 := putBlob(t, f, "a", 1, "a's first segment")
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, appendBlob(a1)))
			aStep(t, f)

			require.NoError(t, f.Seal(ctx, "wal", "0", "b", 3))
			info, err := f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(3), info.Since, "b's tenure begins above a's epoch 2")

			zombie := putBlob(t, f, "a", 2, "uploaded by deposed a after b's seal")
			require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(zombie)), writefence.ErrStaleEpoch)

			require.NoError(t, f.Seal(ctx, "wal", "0", "a", 4))
			info, err = f.Inspect(ctx, "wal", "0")
			require.NoError(t, err)
			assert.Equal(t, uint64(4), info.Since, "a's new tenure begins above b's epoch 3")

			err = f.Commit(ctx, "wal", "0", "a", 5, appendBlob(zombie))
			if !assert.ErrorIs(t, err, writefence.ErrInvalidArgument, "a commits the blob it uploaded, deposed, after b's seal") {
				got, rerr := readBlob(t, f, zombie.Name)
				t.Errorf("a reader following the record reads %q (err %v)", got, rerr)
			}
		})
	}
}
