package record

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
)

// TestRecordEveryTruncationAndBitFlip is a property test over random and
// edge-case records of all three formats: each decodes to what was
// encoded, and every proper prefix and every single-bit flip of it is
// refused by a named check.
func TestRecordEveryTruncationAndBitFlip(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 7))
	type input struct {
		identity, writer string
		epoch            uint64
		body             Body
		v1               bool
	}
	var inputs []input
	maxID, maxW := strings.Repeat("i", MaxIdentityLen), strings.Repeat("w", MaxWriterLen)
	for _, epoch := range []uint64{1, 2, ^uint64(0)} {
		for _, names := range [][2]string{{"x", "y"}, {maxID, maxW}, {"\x00", "\xff"}} {
			for _, payload := range [][]byte{nil, {}, {0}, []byte("payload bytes")} {
				inputs = append(inputs,
					input{names[0], names[1], epoch, Body{Payload: payload}, false},
					input{names[0], names[1], epoch, Body{Payload: payload}, true},
					input{names[0], names[1], epoch, Body{Payload: payload, Stream: true}, false},
					input{names[0], names[1], epoch, Body{Payload: payload, Since: epoch, Stream: true}, false},
					input{names[0], names[1], epoch, Body{Payload: payload, Since: 1, Stream: true, Refs: []BlobRef{
						{Name: keys.BlobName(epoch, names[1], "0123456789abcdef0123456789abcdef"), Size: 1<<63 - 1, CRC: ^uint32(0)},
						{Name: keys.BlobName(1, "w/\x00", "fedcba9876543210fedcba9876543210"), Size: 0, CRC: 0},
					}}, false},
					input{names[0], names[1], epoch, Body{Payload: payload, Since: 1, Horizon: 1<<63 - 1, Stream: true, Refs: []BlobRef{
						{Name: keys.BlobName(epoch, names[1], "0123456789abcdef0123456789abcdef"), Size: 5, CRC: 9},
					}}, false})
			}
		}
	}
	for range 60 {
		in := input{
			identity: string(randBytes(rng, 1+rng.IntN(MaxIdentityLen))),
			writer:   string(randBytes(rng, 1+rng.IntN(MaxWriterLen))),
			epoch:    1 + rng.Uint64N(^uint64(0)),
			body:     Body{Payload: randBytes(rng, rng.IntN(200))},
		}
		switch rng.IntN(4) {
		case 0:
			in.v1 = true
		case 1, 3:
			in.body.Stream = true
			if rng.IntN(4) == 3 {
				in.body.Horizon = 1 + rng.Int64N(1<<62)
			}
			in.body.Since = rng.Uint64N(in.epoch + 1)
			for j := range rng.IntN(4) {
				in.body.Refs = append(in.body.Refs, BlobRef{
					Name: keys.BlobName(1+rng.Uint64N(in.epoch), string(randBytes(rng, 1+rng.IntN(40))), fmt.Sprintf("%032x", j)),
					Size: int64(rng.Uint64N(1 << 63)), CRC: rng.Uint32()})
			}
		}
		inputs = append(inputs, in)
	}

	for i, in := range inputs {
		var rec []byte
		if in.v1 {
			rec = EncodeV1(in.identity, in.writer, in.epoch, in.body.Payload)
		} else {
			rec = wholeRecord(in.identity, in.writer, in.epoch, in.body)
		}
		h, body, check := Decode(rec)
		require.Empty(t, check, "input %d", i)
		require.Equal(t, in.identity, h.Identity, "input %d", i)
		require.Equal(t, in.writer, h.Writer, "input %d", i)
		require.Equal(t, in.epoch, h.Epoch, "input %d", i)
		require.True(t, bytes.Equal(in.body.Payload, body.Payload), "input %d", i)
		require.LessOrEqual(t, h.Size, MaxHeaderSize, "input %d", i)
		if !in.v1 {
			want := in.body
			want.Payload = body.Payload
			if len(want.Refs) == 0 {
				want.Refs = body.Refs
			}
			require.Equal(t, want, body, "input %d", i)
		}
		hOnly, check := DecodeHeader(rec[:h.Size])
		require.Empty(t, check, "input %d", i)
		require.Equal(t, h, hOnly, "input %d", i)

		for n := range len(rec) {
			_, got, check := Decode(rec[:n])
			require.NotEmpty(t, check, "input %d cut to %d of %d bytes accepted", i, n, len(rec))
			require.Nil(t, got.Payload, "input %d cut to %d", i, n)
		}
		flipped := append([]byte(nil), rec...)
		for bit := range 8 * len(rec) {
			flipped[bit/8] ^= 1 << (bit % 8)
			_, got, check := Decode(flipped)
			require.NotEmpty(t, check, "input %d with bit %d flipped accepted", i, bit)
			require.Nil(t, got.Payload, "input %d with bit %d flipped", i, bit)
			flipped[bit/8] ^= 1 << (bit % 8)
		}
	}
}

// TestRecordBytesPinned pins the bytes of one record of each format, as
// the codec wrote them before it moved into this package: stores hold
// records written by earlier releases, and a change to these bytes is a
// change to the format.
func TestRecordBytesPinned(t *testing.T) {
	for name, tc := range map[string]struct {
		rec  []byte
		want string
	}{
		"format 2": {wholeRecord("id", "w", 7, Body{Payload: []byte("p")}),
			"57465200020200010000000000000007000000000000000123e5075c69647716541dcf70"},
		"format 1": {EncodeV1("id", "w", 7, []byte("p")),
			"574652000102000100000000000000070000000000000001148de9c5a7a44d19e56cd9ae1a554bf67847afb0c58f6e12fa29ac7ddfca99406964777a561b0a70"},
		"format 3": {wholeRecord("id", "w", 9, Body{Payload: []byte("p"), Since: 5, Stream: true, Refs: []BlobRef{
			{Name: keys.BlobName(5, "w", "0123456789abcdef0123456789abcdef"), Size: 3, CRC: 0x01020304}}}),
			"57465200030200010000000000000009000000000000000123e5075c0000000000000005000000010000000000000041c05916fc696477947c0096" +
				"0033" + "30303030303030303030303030303035" + "2d" + "3031323334353637383961626364656630313233343536373839616263646566" + "2d" + "77" +
				"0000000000000003" + "01020304" + "70"},
		"format 4": {wholeRecord("id", "w", 9, Body{Payload: []byte("p"), Since: 5, Horizon: 0x0102030405060708, Stream: true}),
			"57465200040200010000000000000009000000000000000123e5075c000000000000000500000000000000000000000000000000" +
				"0102030405060708" + "696477" + "d791458e" + "70"},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, hex.EncodeToString(tc.rec))
		})
	}
}
