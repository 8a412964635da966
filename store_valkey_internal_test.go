//go:build !writefence_novalkey && !writefence_nosdk

package writefence

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/record"
)

// FuzzValkeyValue checks the Valkey adapter's value layout from both ends.
//
// Read: any bytes, as a value the store finds at a key, are read without a
// panic by what the store runs on them (valkeyCheck, the write's check of
// the head, the tail and the length, and then valkeyToken and the data
// where the value is intact), and a value found intact is exactly the
// value its token and data lay out, in its layout: no two byte strings
// read as one content.
//
// Write: the value valkeyValue lays out of a token and the data, in up to
// three parts, is intact, and the readers give back the token, the data
// joined, its length and its CRC-32C. One byte of it changed is found by
// valkeyCheck, and by the write's check when the byte is in the head or
// the tail (the store's documented bound); a value cut short or made
// longer is found by both.
//
//	go test -run '^$' -fuzz '^FuzzValkeyValue$' -fuzztime 200000x .
func FuzzValkeyValue(f *testing.F) {
	for _, n := range []int{0, 1, 100, valkeyHeadEnd - valkeyHeaderLen, valkeyHeadEnd - valkeyHeaderLen + 1, valkeyHeadEnd + valkeyTailLen, 5000} {
		data := bytes.Repeat([]byte("d"), n)
		version := fmt.Sprintf("%032x", n)
		for _, v := range [][]byte{valkeyValue(version, [][]byte{data}), []byte(valkeyFirstValue(version, data))} {
			f.Add(v, uint64(n), uint64(0), uint16(n/3), uint16(n/2), uint32(n), byte(1), uint16(0))
			f.Add(v, uint64(1), uint64(n), uint16(0), uint16(0), uint32(valkeyDigestOff), byte(0x20), uint16(1))
		}
	}
	f.Add([]byte("WFV2"), uint64(0), uint64(0), uint16(0), uint16(0), uint32(0), byte(0), uint16(0))
	f.Fuzz(func(t *testing.T, raw []byte, hi, lo uint64, cut1, cut2 uint16, at uint32, flip byte, resize uint16) {
		// raw as a value found at a key.
		v := string(raw)
		check := valkeyCheck(v)
		writeCheck := valkeyWriteCheck(v)
		assert.True(t, validValkeyDamagedVersion(valkeyDamagedVersion(v)))
		_ = valkeyDamagedHead(v)
		if check == "" {
			assert.Empty(t, writeCheck, "an intact value passes the write's check")
			token, data := valkeyToken(v), v[valkeyHeaderOf(v):]
			require.True(t, validValkeyVersion(token), "%q", token)
			want := valkeyFirstValue(token, []byte(data))
			if strings.HasPrefix(v, valkeyMagic) {
				want = string(valkeyValue(token, [][]byte{[]byte(data)}))
			}
			require.Equal(t, want, v, "an intact value is what its token and data lay out")
		}

		// A value valkeyValue lays out, of data in up to three parts.
		version := fmt.Sprintf("%016x%016x", hi, lo)
		a, b := min(int(cut1), len(raw)), min(int(cut2), len(raw))
		a, b = min(a, b), max(a, b)
		value := string(valkeyValue(version, [][]byte{raw[:a], raw[a:b], raw[b:]}))
		require.Empty(t, valkeyCheck(value))
		require.Empty(t, valkeyWriteCheck(value))
		require.Equal(t, valkeyHeaderLen, valkeyHeaderOf(value))
		require.Equal(t, valkeyTokenOff, valkeyTokenStart(value))
		require.Equal(t, version, valkeyToken(value))
		require.Equal(t, v, value[valkeyHeaderOf(value):], "the data, the parts joined")
		n, ok := parseHex(value[valkeyLengthOff:valkeyCRCOff])
		require.True(t, ok)
		require.Equal(t, uint64(len(raw)), n)
		crc, ok := parseHex(value[valkeyCRCOff:valkeyHeaderLen])
		require.True(t, ok)
		require.Equal(t, uint64(record.CRC32C(raw)), crc)

		// One byte of it changed.
		if flip != 0 {
			i := int(at % uint32(len(value)))
			damaged := []byte(value)
			damaged[i] ^= flip
			assert.NotEmpty(t, valkeyCheck(string(damaged)), "byte %d changed", i)
			if i < valkeyHeadEnd || i >= len(value)-valkeyTailLen {
				assert.NotEmpty(t, valkeyWriteCheck(string(damaged)), "byte %d, in the head or the tail, changed", i)
			}
		}
		// Cut short, or made longer.
		if resize != 0 {
			if size := len(value) - int(resize); size >= 0 {
				assert.NotEmpty(t, valkeyCheck(value[:size]), "cut to %d bytes", size)
				assert.NotEmpty(t, valkeyWriteCheck(value[:size]), "cut to %d bytes", size)
			}
			longer := value + strings.Repeat("x", int(resize))
			assert.NotEmpty(t, valkeyCheck(longer), "%d bytes appended", resize)
			assert.NotEmpty(t, valkeyWriteCheck(longer), "%d bytes appended", resize)
		}
	})
}

// valkeyWriteCheck is the check a write makes of the value v, read as the
// store reads it: its head, its tail and its length, or the whole of a
// value of the first layout.
func valkeyWriteCheck(v string) string {
	h := v[:min(len(v), valkeyHeadEnd)]
	if !strings.HasPrefix(h, valkeyMagic) {
		h = v
	}
	return valkeyHeadOrFirstCheck(h, v[max(0, len(v)-valkeyTailLen):], int64(len(v)))
}

// valkeyFirstValue is a value of the first layout: the SHA-1 of the token
// and the data in hex, the token, the data.
func valkeyFirstValue(token string, data []byte) string {
	sum := valkeySHA1(token, string(data))
	return hex.EncodeToString(sum[:]) + token + string(data)
}

// ValkeyStore is the Valkey adapter's own type, for the package's
// external tests.
type ValkeyStore = valkeyStore

func NewValkeyStore(client redis.UniversalClient) *ValkeyStore {
	return newValkeyStore(client, nil)
}

// ValkeyScriptStages reports whether the Script path stages a value of n
// bytes of data beside the script's call rather than sending it in it.
func ValkeyScriptStages(n int) bool { return valkeyHeaderLen+n > valkeyInlineMax }
