package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestAttack19TenureFloorLostWhenManifestEmpties shows that a shard of
// blobs loses its tenure floor as soon as its first writer's manifest
// references no blob any more, so that a blob a deposed writer uploaded
// after its successor's seal becomes committable, and readable through
// the record, once that writer holds the shard again (promises: SPEC §8 a
// reader never sees the bytes of a writer whose epoch was not admitted;
// Commit's "a blob written before a writer change can never be committed
// after it: a deposed writer's blobs are unreachable for good"; "once a
// shard holds such a record, Push and Seal keep its tenure floor").
//
// Sequence: writer a commits at epoch 1 a manifest referencing its blob:
// record format 3 with since 0 (the shard's first tenure). At epoch 2 a
// drops its references (a compaction into the payload, by Commit; or a
// plain Push). With since 0 and no references the record is written in
// format version 2 again, so it no longer says the shard holds blobs.
// Writer b takes over and seals at epoch 3; over a format 2 record the
// seal records no floor. a, deposed but still running at epoch 2, uploads
// a blob after b's seal; its commit at epoch 2 is refused as stale. a
// later holds the shard again, seals at epoch 4 (floor 0 again: the
// record is still format 2) and commits at epoch 5 its pending blob of
// epoch 2.
//
// Expected: b's seal records since 3, a's seal since 4, and a's commit of
// its epoch-2 blob is refused with ErrInvalidArgument ("before the tenure
// that began at epoch 4"), as it is when a's manifest still references a
// blob (the control subtest).
// Observed: since stays 0; the commit lands and a reader reads, through
// the record, the bytes the deposed writer uploaded after b's seal.
func TestAttack19TenureFloorLostWhenManifestEmpties(t *testing.T) {
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
