package writefence

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// wholeRecord returns a whole record, of format version 2, or 3 when body
// has references or a tenure floor, as a Fence writes it.
func wholeRecord(identity, writer string, epoch uint64, body record.Body) []byte {
	return bytes.Join(record.Encode(identity, writer, epoch, body, record.CRC32C(body.Payload)), nil)
}

// forgeCRC returns a copy of p, of the same length, whose last four bytes
// are changed so that its CRC-32C equals want. CRC-32C is linear over
// GF(2), so the effect of each of the last 32 bits on the checksum is a
// fixed vector, and a set of bits to flip is found by elimination.
func forgeCRC(t *testing.T, p []byte, want uint32) []byte {
	t.Helper()
	require.GreaterOrEqual(t, len(p), 4)
	out := append([]byte(nil), p...)
	zero := record.CRC32C(make([]byte, len(p)))
	type row struct{ effect, bits uint32 }
	var rows []row
	for bit := range 32 {
		e := make([]byte, len(p))
		e[len(p)-4+bit/8] = 1 << (bit % 8)
		rows = append(rows, row{record.CRC32C(e) ^ zero, 1 << bit})
	}
	// Reduce to one row per leading bit of effect.
	var basis [32]row
	for _, r := range rows {
		for i := 31; i >= 0 && r.effect != 0; i-- {
			if r.effect&(1<<i) == 0 {
				continue
			}
			if basis[i].effect == 0 {
				basis[i] = r
				break
			}
			r.effect ^= basis[i].effect
			r.bits ^= basis[i].bits
		}
	}
	need, flip := record.CRC32C(p)^want, uint32(0)
	for i := 31; i >= 0; i-- {
		if need&(1<<i) != 0 {
			require.NotZero(t, basis[i].effect, "no basis vector for bit %d", i)
			need ^= basis[i].effect
			flip ^= basis[i].bits
		}
	}
	for bit := range 32 {
		if flip&(1<<bit) != 0 {
			out[len(p)-4+bit/8] ^= 1 << (bit % 8)
		}
	}
	require.Equal(t, want, record.CRC32C(out))
	return out
}

// TestReplayIsDecidedByThePayload: a record of the same epoch, writer,
// length and payload checksum as a push is that push only if its payload
// is the same bytes; the checksum alone never decides.
func TestReplayIsDecidedByThePayload(t *testing.T) {
	ctx := t.Context()
	mem := &MemStore{}
	mine := []byte("segment 0007: the bytes this writer pushed")
	other := forgeCRC(t, []byte("segment 0007: other bytes, same length!!!!"), record.CRC32C(mine))
	require.Len(t, other, len(mine))
	require.NotEqual(t, mine, other)

	require.NoError(t, (&Fence{Store: mem}).Push(ctx, "wal", "0", "a", 7, mine))
	require.NoError(t, (&Fence{Store: mem}).Push(ctx, "wal", "0", "a", 7, mine), "the same push again is its replay")
	err := (&Fence{Store: mem}).Push(ctx, "wal", "0", "a", 7, other)
	require.ErrorIs(t, err, ErrStaleEpoch, "other bytes with the same checksum are not this push")
}

// TestFormatVersion1Records: records written in format version 1 are read,
// replayed and pushed over; what a Fence writes is version 2.
func TestFormatVersion1Records(t *testing.T) {
	ctx := t.Context()
	mem := &MemStore{}
	key, err := keys.Shard("", "wal", "0")
	require.NoError(t, err)
	_, err = mem.PutIfVersion(ctx, key, record.EncodeV1(defaultIdentity, "a", 5, []byte("old format")), "")
	require.NoError(t, err)

	f := &Fence{Store: mem}
	epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(5), epoch)
	assert.Equal(t, "a", writer)
	assert.Equal(t, "old format", string(payload))
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 5, []byte("old format")), "a replay of a version 1 record")
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "b", 5, []byte("x")), ErrStaleEpoch)
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 6, []byte("new format")))
	data, _, err := mem.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, byte(2), data[4], "format version written")
}
