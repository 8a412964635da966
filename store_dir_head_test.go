package writefence_test

import (
	"context"
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
)

// TestDirDamagedLayoutKeepsRecordHeader: damage to the directory store's
// own file header (the magic, the format version, the key length, the data
// length, a byte of the stored key) leaves the record's header, intact on
// disk, readable from CorruptError.Head: the store takes the head where an
// intact file of the key has its data, whatever the damaged fields claim.
// So Inspect shows the record's epoch, and a Settle below it is refused:
// the recorded epoch never goes down, settles included.
//
// Sequence: Push at epoch 100; damage the object file in place, in the
// store's own header only; Inspect; Settle at epoch 2 with floor 1. Want:
// Inspect shows epoch 100, the settle is refused as stale, and Inspect
// still shows 100.
func TestDirDamagedLayoutKeepsRecordHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte, keyLen int)
	}{
		// The data length, 8 bytes at offset 23, says 0: the head is cut to
		// nothing although the record is all there.
		{"data length zero", func(b []byte, _ int) { binary.BigEndian.PutUint64(b[23:], 0) }},
		// The data length says 10 bytes: the head is cut inside the header.
		{"data length short", func(b []byte, _ int) { binary.BigEndian.PutUint64(b[23:], 10) }},
		// One bit of the magic: no head at all, though the key and the
		// record follow in place.
		{"magic", func(b []byte, _ int) { b[0] ^= 1 }},
		// The format version byte: no head either.
		{"format version", func(b []byte, _ int) { b[4] ^= 1 }},
		// One bit of the key length: the key no longer matches, no head.
		{"key length", func(b []byte, _ int) { b[22] ^= 1 }},
		// One bit of the stored key itself (the store knows the key it
		// reads, so where the data starts is still known): no head.
		{"key byte", func(b []byte, _ int) { b[31] ^= 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			store := newDirStore(t, dir)
			f := &writefence.Fence{Store: store}
			require.NoError(t, f.Push(ctx, "wal", "0", "writer-a", 100, []byte("the shard's state at epoch 100")))

			key := mustKey(t, "wal", "0")
			path := testserver.DirObjectFile(dir, key)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			keyLen := int(binary.BigEndian.Uint16(b[21:]))
			record := append([]byte(nil), b[31+keyLen:len(b)-4]...)
			tc.damage(b, keyLen)
			require.NoError(t, os.WriteFile(path, b, 0o600))
			// The record's own bytes are intact in the file.
			require.Equal(t, record, b[31+keyLen:len(b)-4])

			info, err := f.Inspect(ctx, "wal", "0")
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			require.NotEmpty(t, info.Version)

			settleErr := f.Settle(ctx, "wal", "0", writefence.Settlement{
				Version: info.Version, Writer: "operator", Epoch: 2, Floor: 1, Payload: []byte("settled"),
			})
			// The refused settle leaves the damage in place, for Inspect.
			after, afterErr := f.Inspect(ctx, "wal", "0")

			assert.Equal(t, uint64(100), info.Epoch,
				"Inspect hides the epoch of a record header that is intact on disk")
			assert.ErrorIs(t, settleErr, writefence.ErrStaleEpoch,
				"Settle at epoch 2 over an intact header at epoch 100 must be refused")
			require.ErrorIs(t, afterErr, writefence.ErrCorrupt)
			require.GreaterOrEqual(t, after.Epoch, uint64(100), "the recorded epoch went down from 100 to %d", after.Epoch)
		})
	}
}
