package writefence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestAttack19CommitWritesAManifestItCannotRead shows Commit landing a
// manifest that the package's own decoder refuses as corrupt, so that one
// commit returning nil turns the shard unreadable and unwritable until an
// operator settles it (promises: decoding is strict and the record a
// commit writes is one it decodes; a refused commit writes nothing; a
// corrupt record is never produced by the package's own writes).
//
// Sequence: a puts a blob and commits a manifest whose reference list
// holds it twice: the same reference twice, as a non-idempotent "append
// the segment" commit retried over a manifest that already has it
// produces, or the same name with another checksum. Commit checks the
// writer, epoch, existence and size of the references it newly adds, not
// that their names are distinct; the encoder writes the list as given.
// The decoder refuses a name repeated ("reference repeated").
//
// Expected: Commit refuses the manifest (ErrInvalidArgument) and writes
// nothing; the shard keeps reading as before.
// Observed: Commit returns nil; then Inspect, OpenBlob and Collect fail
// with ErrCorrupt and every later Commit, Push and Seal is refused.
func TestAttack19CommitWritesAManifestItCannotRead(t *testing.T) {
	cases := map[string]func(ref writefence.BlobRef) []writefence.BlobRef{
		"the same reference twice": func(ref writefence.BlobRef) []writefence.BlobRef {
			return []writefence.BlobRef{ref, ref}
		},
		"one name with two checksums": func(ref writefence.BlobRef) []writefence.BlobRef {
			other := ref
			other.CRC ^= 1
			return []writefence.BlobRef{ref, other}
		},
	}
	for name, refs := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			f := &writefence.Fence{Store: &writefence.MemStore{}}
			first := putBlob(t, f, "a", 1, "segment one")
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, appendBlob(first)))
			seg := putBlob(t, f, "a", 2, "segment two")

			err := f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
				m.Blobs = append(m.Blobs, refs(seg)...)
				return m, nil
			})
			assert.ErrorIs(t, err, writefence.ErrInvalidArgument, "a manifest that names a blob twice is refused")

			_, err = f.Inspect(ctx, "wal", "0")
			assert.NoError(t, err, "the recorded manifest decodes")
			_, err = readBlob(t, f, first.Name)
			assert.NoError(t, err, "the committed blob is still readable")
			_, err = f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
			assert.NoError(t, err, "collect")
			assert.NoError(t, f.Seal(ctx, "wal", "0", "b", 3), "a successor can still take over")
		})
	}
}
