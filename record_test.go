package writefence

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
)

func testRecord(t testing.TB, identity, writer string, epoch uint64, payload []byte) []byte {
	t.Helper()
	return wholeRecord(identity, writer, epoch, recordBody{payload: payload})
}

// wholeRecord returns a whole record, of format version 2, or 3 when body
// has references or a tenure floor, as a Fence writes it.
func wholeRecord(identity, writer string, epoch uint64, body recordBody) []byte {
	return bytes.Join(encodeRecord(identity, writer, epoch, body, crc32Castagnoli(body.payload)), nil)
}

// encodeRecordV1 returns a record of format version 1, as earlier releases
// wrote it: a SHA-256 of the payload where version 2 has its CRC-32C.
func encodeRecordV1(identity, writer string, epoch uint64, payload []byte) []byte {
	end := v1HeaderSize + len(identity) + len(writer)
	b := make([]byte, end+checksumSize, end+checksumSize+len(payload))
	copy(b, recordMagic)
	b[4] = 1
	b[5] = byte(len(identity))
	binary.BigEndian.PutUint16(b[6:], uint16(len(writer)))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], uint64(len(payload)))
	digest := sha256.Sum256(payload)
	copy(b[24:], digest[:])
	n := copy(b[v1HeaderSize:], identity)
	copy(b[v1HeaderSize+n:], writer)
	binary.BigEndian.PutUint32(b[end:], crc32Castagnoli(b[:end]))
	return append(b, payload...)
}

// TestRecordRoundTrip is a property test: any valid fields encode to a
// record that decodes to the same fields, with a header no larger than
// maxHeaderSize that decodes alone.
func TestRecordRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	for i := range 2000 {
		identity := string(randBytes(1 + rng.IntN(maxIdentityLen)))
		writer := string(randBytes(1 + rng.IntN(maxWriterLen)))
		epoch := 1 + rng.Uint64N(1<<63)
		if i%10 == 0 {
			epoch = ^uint64(0)
		}
		payload := randBytes(rng.IntN(4096))
		if i%7 == 0 {
			payload = nil
		}
		rec := testRecord(t, identity, writer, epoch, payload)
		if i%5 == 0 {
			rec = encodeRecordV1(identity, writer, epoch, payload)
		}

		h, got, check := decodeRecord(rec)
		require.Empty(t, check)
		assert.Equal(t, identity, h.identity)
		assert.Equal(t, writer, h.writer)
		assert.Equal(t, epoch, h.epoch)
		assert.Equal(t, uint64(len(payload)), h.payloadLen)
		assert.True(t, bytes.Equal(payload, got.payload))
		require.LessOrEqual(t, h.size, maxHeaderSize)

		hOnly, check := decodeHeader(rec[:h.size])
		require.Empty(t, check)
		assert.Equal(t, h, hOnly)
	}
}

// TestRecordCorruption names the check each corruption fails, in both
// format versions a reader reads.
func TestRecordCorruption(t *testing.T) {
	t.Run("v2", func(t *testing.T) {
		testRecordCorruption(t, testRecord(t, "id", "writer-a", 7, []byte("payload bytes")), fixedHeaderSize, "payload checksum")
	})
	t.Run("v1", func(t *testing.T) {
		testRecordCorruption(t, encodeRecordV1("id", "writer-a", 7, []byte("payload bytes")), v1HeaderSize, "payload digest")
	})
}

func testRecordCorruption(t *testing.T, good []byte, fixed int, payloadCheck string) {
	hsize := fixed + len("id") + len("writer-a") + checksumSize
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	// reseal recomputes the header checksum, so a test reaches the checks
	// that come after it.
	reseal := func(b []byte) []byte {
		end := hsize - checksumSize
		binary.BigEndian.PutUint32(b[end:], crc32Castagnoli(b[:end]))
		return b
	}
	cases := []struct {
		name  string
		rec   []byte
		check string
	}{
		{"empty", nil, "truncated header"},
		{"magic prefix only", good[:3], "truncated header"},
		{"wrong magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "magic"},
		{"garbage", []byte("this is not a record at all, just some text that is long enough"), "magic"},
		{"short header", good[:20], "truncated header"},
		{"unknown format version", mutate(func(b []byte) []byte { b[4] = 4; return b }), "unknown format version"},
		{"format version 0", mutate(func(b []byte) []byte { b[4] = 0; return b }), "unknown format version"},
		{"empty identity", mutate(func(b []byte) []byte { b[5] = 0; return b }), "empty identity"},
		{"empty writer", mutate(func(b []byte) []byte { b[6], b[7] = 0, 0; return b }), "empty writer"},
		{"writer too long", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], maxWriterLen+1); return b }), "writer length"},
		{"header cut before checksum", good[:hsize-1], "truncated header"},
		{"flipped checksum byte", mutate(func(b []byte) []byte { b[hsize-1] ^= 0xff; return b }), "header checksum"},
		{"flipped epoch byte", mutate(func(b []byte) []byte { b[15] ^= 1; return b }), "header checksum"},
		{"epoch 0", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[8:], 0); return reseal(b) }), "epoch 0"},
		{"truncated payload", good[:len(good)-1], "truncated payload"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), "trailing bytes"},
		{"claims 4 GiB payload", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[16:], 4<<30); return reseal(b) }), "truncated payload"},
		{"flipped payload byte", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), payloadCheck},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, body, check := decodeRecord(tc.rec)
			assert.Equal(t, tc.check, check)
			assert.Nil(t, body.payload)
		})
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the decoder: it must never
// panic, and whatever it accepts must re-encode to exactly the same bytes
// (there is one encoding of each record).
func FuzzDecodeRecord(f *testing.F) {
	f.Add(testRecord(f, "writefence/v1", "node-1", 1, nil))
	f.Add(testRecord(f, "writefence/v1", "node-2", 42, []byte("wal segment 0001")))
	f.Add(testRecord(f, "x", "\x00\xff", ^uint64(0), bytes.Repeat([]byte{0xAB}, 300)))
	f.Add(encodeRecordV1("writefence/v1", "node-3", 7, []byte("a record of format version 1")))
	f.Add(wholeRecord("writefence/v1", "node-4", 9, testStreamBody()))
	f.Add([]byte("WFR\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, check := decodeRecord(b)
		hOnly, hCheck := decodeHeader(b)
		if hCheck != "" {
			if check != hCheck {
				t.Fatalf("header check %q but record check %q", hCheck, check)
			}
			return
		}
		if hOnly.size > maxHeaderSize {
			t.Fatalf("header of %d bytes accepted", hOnly.size)
		}
		if check != "" {
			return
		}
		if h.epoch == 0 || h.identity == "" || h.writer == "" {
			t.Fatalf("accepted a record with an empty field: %+v", h)
		}
		again := wholeRecord(h.identity, h.writer, h.epoch, body)
		if h.version == 1 {
			again = encodeRecordV1(h.identity, h.writer, h.epoch, body.payload)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded record re-encodes differently")
		}
	})
}

// forgeCRC returns a copy of p, of the same length, whose last four bytes
// are changed so that its CRC-32C equals want. CRC-32C is linear over
// GF(2), so the effect of each of the last 32 bits on the checksum is a
// fixed vector, and a set of bits to flip is found by elimination.
func forgeCRC(t *testing.T, p []byte, want uint32) []byte {
	t.Helper()
	require.GreaterOrEqual(t, len(p), 4)
	out := append([]byte(nil), p...)
	zero := crc32Castagnoli(make([]byte, len(p)))
	type row struct{ effect, bits uint32 }
	var rows []row
	for bit := range 32 {
		e := make([]byte, len(p))
		e[len(p)-4+bit/8] = 1 << (bit % 8)
		rows = append(rows, row{crc32Castagnoli(e) ^ zero, 1 << bit})
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
	need, flip := crc32Castagnoli(p)^want, uint32(0)
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
	require.Equal(t, want, crc32Castagnoli(out))
	return out
}

// TestReplayIsDecidedByThePayload: a record of the same epoch, writer,
// length and payload checksum as a push is that push only if its payload
// is the same bytes; the checksum alone never decides.
func TestReplayIsDecidedByThePayload(t *testing.T) {
	ctx := t.Context()
	mem := &MemStore{}
	mine := []byte("segment 0007: the bytes this writer pushed")
	other := forgeCRC(t, []byte("segment 0007: other bytes, same length!!!!"), crc32Castagnoli(mine))
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
	_, err = mem.PutIfVersion(ctx, key, encodeRecordV1(defaultIdentity, "a", 5, []byte("old format")), "")
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

// testStreamBody is a body of format version 3: references and a floor.
func testStreamBody() recordBody {
	return recordBody{payload: []byte("manifest"), since: 5, stream: true, refs: []BlobRef{
		{Name: keys.BlobName(5, "node-4", "0123456789abcdef0123456789abcdef"), Size: 10, CRC: 7},
		{Name: keys.BlobName(8, "node-4", "fedcba9876543210fedcba9876543210"), Size: 0, CRC: 0},
	}}
}

// TestStreamRecord: a record with references and a tenure floor is written
// in format version 3, decodes to exactly what was encoded, and names the
// check each corruption of its references fails; without either it stays
// in format version 2.
func TestStreamRecord(t *testing.T) {
	body := testStreamBody()
	rec := wholeRecord("id", "node-4", 9, body)
	h, got, check := decodeRecord(rec)
	require.Empty(t, check)
	assert.Equal(t, byte(streamVersion), h.version)
	assert.Equal(t, body, got)
	assert.Equal(t, uint64(5), h.since)
	hOnly, check := decodeHeader(rec[:h.size])
	require.Empty(t, check)
	assert.Equal(t, h, hOnly)

	plain := wholeRecord("id", "w", 9, recordBody{payload: []byte("x")})
	assert.Equal(t, byte(recordVersion), plain[4], "no references and no floor: format version 2")
	floorOnly := wholeRecord("id", "w", 9, recordBody{payload: []byte("x"), since: 3})
	assert.Equal(t, byte(streamVersion), floorOnly[4])
	// A stream's record stays one with no references and no floor: the
	// format says the shard holds blobs, and decodes back to it.
	bare := recordBody{payload: []byte("x"), refs: []BlobRef{}, stream: true}
	bareRec := wholeRecord("id", "w", 9, bare)
	assert.Equal(t, byte(streamVersion), bareRec[4])
	_, gotBare, check := decodeRecord(bareRec)
	require.Empty(t, check)
	assert.Equal(t, bare, gotBare)

	refsAt := h.size
	reseal := func(b []byte) []byte {
		end := h.size - checksumSize
		binary.BigEndian.PutUint32(b[end:], crc32Castagnoli(b[:end]))
		return b
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), rec...)) }
	refsCRC := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[48:], crc32Castagnoli(b[refsAt:uint64(refsAt)+h.refsLen]))
		return reseal(b)
	}
	for name, tc := range map[string]struct {
		rec   []byte
		check string
	}{
		"flipped reference byte":      {mutate(func(b []byte) []byte { b[refsAt+3] ^= 1; return b }), "references checksum"},
		"a name that is no blob name": {mutate(func(b []byte) []byte { b[refsAt+2] = 'z'; return refsCRC(b) }), "reference"},
		"one reference fewer counted": {mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[36:], 1); return reseal(b) }), "trailing references"},
		"one reference more counted":  {mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[36:], 3); return reseal(b) }), "truncated references"},
		"since above epoch":           {mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[28:], 10); return reseal(b) }), "since above epoch"},
		"truncated":                   {rec[:len(rec)-1], "truncated payload"},
		"repeated reference": {wholeRecord("id", "node-4", 9, recordBody{payload: []byte("m"), refs: []BlobRef{body.refs[0], body.refs[0]}}),
			"reference repeated"},
	} {
		t.Run(name, func(t *testing.T) {
			_, got, check := decodeRecord(tc.rec)
			assert.Equal(t, tc.check, check)
			assert.Nil(t, got.payload)
		})
	}
}
