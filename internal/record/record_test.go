package record

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/blake3"
	"github.com/zeebo/xxh3"

	"github.com/writefence/writefence/internal/keys"
)

func testRecord(t testing.TB, identity, writer string, epoch uint64, payload []byte) []byte {
	t.Helper()
	return wholeRecord(identity, writer, epoch, Body{Payload: payload})
}

// wholeRecord returns a whole record, of format version 2, or 3 when body
// has references or a tenure floor, as a Fence writes it.
func wholeRecord(identity, writer string, epoch uint64, body Body) []byte {
	return bytes.Join(Encode(identity, writer, epoch, body, CRC32C(body.Payload)), nil)
}

// randBytes returns n bytes drawn from rng.
func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// TestRecordRoundTrip is a property test: any valid fields encode to a
// record that decodes to the same fields, with a header no larger than
// MaxHeaderSize that decodes alone.
func TestRecordRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		identity := string(randBytes(rng, 1+rng.IntN(MaxIdentityLen)))
		writer := string(randBytes(rng, 1+rng.IntN(MaxWriterLen)))
		epoch := 1 + rng.Uint64N(1<<63)
		if i%10 == 0 {
			epoch = ^uint64(0)
		}
		payload := randBytes(rng, rng.IntN(4096))
		if i%7 == 0 {
			payload = nil
		}
		rec := testRecord(t, identity, writer, epoch, payload)
		if i%5 == 0 {
			rec = EncodeV1(identity, writer, epoch, payload)
		}

		h, got, check := Decode(rec)
		require.Empty(t, check)
		assert.Equal(t, identity, h.Identity)
		assert.Equal(t, writer, h.Writer)
		assert.Equal(t, epoch, h.Epoch)
		assert.Equal(t, uint64(len(payload)), h.PayloadLen)
		assert.True(t, bytes.Equal(payload, got.Payload))
		require.LessOrEqual(t, h.Size, MaxHeaderSize)

		hOnly, check := DecodeHeader(rec[:h.Size])
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
		testRecordCorruption(t, EncodeV1("id", "writer-a", 7, []byte("payload bytes")), v1HeaderSize, "payload digest")
	})
}

func testRecordCorruption(t *testing.T, good []byte, fixed int, payloadCheck string) {
	hsize := fixed + len("id") + len("writer-a") + ChecksumSize
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	// reseal recomputes the header checksum, so a test reaches the checks
	// that come after it.
	reseal := func(b []byte) []byte {
		end := hsize - ChecksumSize
		binary.BigEndian.PutUint32(b[end:], CRC32C(b[:end]))
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
		{"unknown format version", mutate(func(b []byte) []byte { b[4] = 5; return b }), "unknown format version"},
		{"format version 0", mutate(func(b []byte) []byte { b[4] = 0; return b }), "unknown format version"},
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
		{"flipped payload byte", mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), payloadCheck},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, body, check := Decode(tc.rec)
			assert.Equal(t, tc.check, check)
			assert.Nil(t, body.Payload)
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
	f.Add(EncodeV1("writefence/v1", "node-3", 7, []byte("a record of format version 1")))
	f.Add(wholeRecord("writefence/v1", "node-4", 9, testStreamBody()))
	f.Add([]byte("WFR\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, check := Decode(b)
		hOnly, hCheck := DecodeHeader(b)
		if hCheck != "" {
			if check != hCheck {
				t.Fatalf("header check %q but record check %q", hCheck, check)
			}
			return
		}
		if hOnly.Size > MaxHeaderSize {
			t.Fatalf("header of %d bytes accepted", hOnly.Size)
		}
		if check != "" {
			return
		}
		if h.Epoch == 0 || h.Identity == "" || h.Writer == "" {
			t.Fatalf("accepted a record with an empty field: %+v", h)
		}
		again := wholeRecord(h.Identity, h.Writer, h.Epoch, body)
		if h.Version == 1 {
			again = EncodeV1(h.Identity, h.Writer, h.Epoch, body.Payload)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded record re-encodes differently")
		}
	})
}

// testStreamBody is a body of format version 3: references and a floor.
func testStreamBody() Body {
	return Body{Payload: []byte("manifest"), Since: 5, Stream: true, Refs: []BlobRef{
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
	h, got, check := Decode(rec)
	require.Empty(t, check)
	assert.Equal(t, byte(StreamVersion), h.Version)
	assert.Equal(t, body, got)
	assert.Equal(t, uint64(5), h.Since)
	hOnly, check := DecodeHeader(rec[:h.Size])
	require.Empty(t, check)
	assert.Equal(t, h, hOnly)

	plain := wholeRecord("id", "w", 9, Body{Payload: []byte("x")})
	assert.Equal(t, byte(PlainVersion), plain[4], "no references and no floor: format version 2")
	floorOnly := wholeRecord("id", "w", 9, Body{Payload: []byte("x"), Since: 3})
	assert.Equal(t, byte(StreamVersion), floorOnly[4])
	// A stream's record stays one with no references and no floor: the
	// format says the shard holds blobs, and decodes back to it.
	bare := Body{Payload: []byte("x"), Refs: []BlobRef{}, Stream: true}
	bareRec := wholeRecord("id", "w", 9, bare)
	assert.Equal(t, byte(StreamVersion), bareRec[4])
	_, gotBare, check := Decode(bareRec)
	require.Empty(t, check)
	assert.Equal(t, bare, gotBare)

	refsAt := h.Size
	reseal := func(b []byte) []byte {
		end := h.Size - ChecksumSize
		binary.BigEndian.PutUint32(b[end:], CRC32C(b[:end]))
		return b
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), rec...)) }
	refsCRC := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[48:], CRC32C(b[refsAt:uint64(refsAt)+h.RefsLen]))
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
		"repeated reference": {wholeRecord("id", "node-4", 9, Body{Payload: []byte("m"), Refs: []BlobRef{body.Refs[0], body.Refs[0]}}),
			"reference repeated"},
	} {
		t.Run(name, func(t *testing.T) {
			_, got, check := Decode(tc.rec)
			assert.Equal(t, tc.check, check)
			assert.Nil(t, got.Payload)
		})
	}
}

// TestHorizonRecord: a stream's record with a collection horizon is
// written in format version 4 and decodes to exactly what was encoded; a
// horizon of zero or less in a record of that version is damage.
func TestHorizonRecord(t *testing.T) {
	body := testStreamBody()
	body.Horizon = 1_700_000_000_000_000_000
	rec := wholeRecord("id", "node-4", 9, body)
	h, got, check := Decode(rec)
	require.Empty(t, check)
	assert.Equal(t, byte(HorizonVersion), h.Version)
	assert.True(t, h.Stream())
	assert.Equal(t, body, got)
	assert.Equal(t, body.Horizon, h.Horizon)
	assert.Equal(t, uint64(5), TenureFloor(h))

	zero := append([]byte(nil), rec...)
	binary.BigEndian.PutUint64(zero[52:], 0)
	end := h.Size - ChecksumSize
	binary.BigEndian.PutUint32(zero[end:], CRC32C(zero[:end]))
	_, _, check = Decode(zero)
	assert.Equal(t, "horizon", check)
}

// TestSalvageRefs: the references of a record whose payload is damaged,
// or whose end was lost, are still read when they are whole and match
// their checksum; damage in them, or in the header, leaves them unknown.
func TestSalvageRefs(t *testing.T) {
	body := testStreamBody()
	rec := wholeRecord("id", "node-4", 9, body)
	h, _, check := Decode(rec)
	require.Empty(t, check)
	refsEnd := h.Size + int(h.RefsLen)

	payloadFlipped := append([]byte(nil), rec...)
	payloadFlipped[len(rec)-1] ^= 1
	_, _, check = Decode(payloadFlipped)
	require.Equal(t, "payload checksum", check)
	for name, b := range map[string][]byte{
		"whole":                rec,
		"payload flipped":      payloadFlipped,
		"cut after references": rec[:refsEnd],
		"trailing bytes":       append(append([]byte(nil), rec...), 0),
		"cut inside payload":   rec[:refsEnd+1],
	} {
		refs, ok := SalvageRefs(b)
		assert.True(t, ok, name)
		assert.Equal(t, body.Refs, refs, name)
	}

	refFlipped := append([]byte(nil), rec...)
	refFlipped[h.Size+3] ^= 1
	headerFlipped := append([]byte(nil), rec...)
	headerFlipped[10] ^= 1
	for name, b := range map[string][]byte{
		"reference flipped": refFlipped,
		"header flipped":    headerFlipped,
		"cut in references": rec[:refsEnd-1],
		"cut in header":     rec[:h.Size-1],
	} {
		refs, ok := SalvageRefs(b)
		assert.False(t, ok, name)
		assert.Nil(t, refs, name)
	}

	plain, ok := SalvageRefs(wholeRecord("id", "w", 3, Body{Payload: []byte("x")}))
	assert.True(t, ok, "a plain record references nothing")
	assert.Nil(t, plain)
}

// BenchmarkDigest measures, side by side, the candidates for the digest a
// record carries of its payload: the one pass over the payload that a push
// makes before (or while) it sends it. The record code takes only the
// standard library; BLAKE3 and XXH3 are measured as the best a dependency
// could give.
//
//	go test -run '^$' -bench '^BenchmarkDigest$' -benchmem -count 10 ./internal/record | tee digest.txt
//	benchstat -col /digest digest.txt
func BenchmarkDigest(b *testing.B) {
	castagnoli, ecma := crc32.MakeTable(crc32.Castagnoli), crc64.MakeTable(crc64.ECMA)
	digests := []struct {
		name string
		sum  func([]byte)
	}{
		{"sha256", func(p []byte) { _ = sha256.Sum256(p) }},
		{"sha512-256", func(p []byte) { _ = sha512.Sum512_256(p) }},
		{"md5", func(p []byte) { _ = md5.Sum(p) }},
		{"crc32c", func(p []byte) { _ = crc32.Checksum(p, castagnoli) }},
		{"crc64", func(p []byte) { _ = crc64.Checksum(p, ecma) }},
		{"fnv128a", func(p []byte) { sum(fnv.New128a(), p) }},
		{"blake3", func(p []byte) { _ = blake3.Sum256(p) }},
		{"xxh3-128", func(p []byte) { _ = xxh3.Hash128(p) }},
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"16MiB", 16 << 20}} {
		payload := make([]byte, size.n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		for _, d := range digests {
			b.Run("size="+size.name+"/digest="+d.name, func(b *testing.B) {
				b.SetBytes(int64(size.n))
				b.ReportAllocs()
				for b.Loop() {
					d.sum(payload)
				}
			})
		}
	}
}

func sum(h hash.Hash, p []byte) {
	h.Write(p)
	_ = h.Sum(nil)
}
