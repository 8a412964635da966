package writefence

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testRecord(t testing.TB, identity, writer string, epoch uint64, payload []byte) []byte {
	t.Helper()
	return encodeRecord(identity, writer, epoch, sha256.Sum256(payload), payload)
}

// TestRecordRoundTrip is a property test: any valid fields encode to a
// record that decodes to the same fields, with a header no larger than
// MaxHeaderSize that decodes alone.
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
		identity := string(randBytes(1 + rng.IntN(MaxIdentityLen)))
		writer := string(randBytes(1 + rng.IntN(MaxWriterLen)))
		epoch := 1 + rng.Uint64N(1<<63)
		if i%10 == 0 {
			epoch = ^uint64(0)
		}
		payload := randBytes(rng.IntN(4096))
		if i%7 == 0 {
			payload = nil
		}
		rec := testRecord(t, identity, writer, epoch, payload)

		h, got, check := decodeRecord(rec)
		require.Empty(t, check)
		assert.Equal(t, identity, h.identity)
		assert.Equal(t, writer, h.writer)
		assert.Equal(t, epoch, h.epoch)
		assert.Equal(t, uint64(len(payload)), h.payloadLen)
		assert.True(t, bytes.Equal(payload, got))
		require.LessOrEqual(t, h.size, MaxHeaderSize)

		hOnly, check := decodeHeader(rec[:h.size])
		require.Empty(t, check)
		assert.Equal(t, h, hOnly)
	}
}

// TestRecordCorruption names the check each corruption fails.
func TestRecordCorruption(t *testing.T) {
	good := testRecord(t, "id", "writer-a", 7, []byte("payload bytes"))
	hsize := fixedHeaderSize + len("id") + len("writer-a") + checksumSize
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
		{"unknown format version", mutate(func(b []byte) []byte { b[4] = 2; return b }), "unknown format version"},
		{"empty identity", mutate(func(b []byte) []byte { b[5] = 0; return b }), "empty identity"},
		{"empty writer", mutate(func(b []byte) []byte { b[6], b[7] = 0, 0; return b }), "empty writer"},
		{"writer too long", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], MaxWriterLen+1); return b }), "writer length"},
		{"header cut before checksum", good[:hsize-1], "truncated header"},
		{"flipped checksum byte", mutate(func(b []byte) []byte { b[hsize-1] ^= 0xff; return b }), "header checksum"},
		{"flipped epoch byte", mutate(func(b []byte) []byte { b[15] ^= 1; return b }), "header checksum"},
		{"epoch 0", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[8:], 0); return reseal(b) }), "epoch 0"},
		{"truncated payload", good[:len(good)-1], "truncated payload"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), "trailing bytes"},
		{"claims 4 GiB payload", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[16:], 4<<30); return reseal(b) }), "truncated payload"},
		{"flipped payload byte", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "payload digest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, payload, check := decodeRecord(tc.rec)
			assert.Equal(t, tc.check, check)
			assert.Nil(t, payload)
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
	f.Add([]byte("WFR\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, check := decodeRecord(b)
		hOnly, hCheck := decodeHeader(b)
		if hCheck != "" {
			if check != hCheck {
				t.Fatalf("header check %q but record check %q", hCheck, check)
			}
			return
		}
		if hOnly.size > MaxHeaderSize {
			t.Fatalf("header of %d bytes accepted", hOnly.size)
		}
		if check != "" {
			return
		}
		if h.epoch == 0 || h.identity == "" || h.writer == "" {
			t.Fatalf("accepted a record with an empty field: %+v", h)
		}
		again := encodeRecord(h.identity, h.writer, h.epoch, h.digest, payload)
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded record re-encodes differently")
		}
	})
}
