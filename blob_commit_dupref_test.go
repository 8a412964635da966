package writefence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestCommitRefusesRepeatedReference: a manifest whose reference list
// names one blob twice (the same reference repeated, as a "append the
// segment" commit retried over a manifest that already has it produces,
// or one name with another checksum) is refused with ErrInvalidArgument
// and nothing is written: a commit never lands a record the decoder
// refuses, and the shard keeps reading and taking writes as before.
func TestCommitRefusesRepeatedReference(t *testing.T) {
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
