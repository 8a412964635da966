package writefence

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

func TestLeaseRecordStrict(t *testing.T) {
	inc := [leaseIncSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	good := encodeLease("node-a", 7, 1234, inc)
	r, check := decodeLease(good)
	require.Empty(t, check)
	assert.Equal(t, leaseRecord{Holder: "node-a", Term: 7, Expiry: 1234, Incarnation: inc}, r)

	// Format version 1 (no incarnation) still decodes, with none.
	v1 := append([]byte(nil), good[:leaseV1HeaderSize]...)
	v1[4] = 1
	v1 = append(v1, "node-a"...)
	v1 = binary.BigEndian.AppendUint32(v1, record.CRC32C(v1))
	r, check = decodeLease(v1)
	require.Empty(t, check)
	assert.Equal(t, leaseRecord{Holder: "node-a", Term: 7, Expiry: 1234}, r)

	flip := func(i int) []byte { return testserver.Flipped(good, i) }
	cases := map[string]struct {
		b     []byte
		check string
	}{
		"empty":           {nil, "truncated"},
		"magic":           {flip(0), "magic"},
		"version":         {flip(4), "unknown format version"},
		"term bit":        {flip(14), "checksum"},
		"holder byte":     {flip(leaseHeaderSize), "checksum"},
		"incarnation bit": {flip(30), "checksum"},
		"checksum":        {flip(len(good) - 1), "checksum"},
		"truncated":       {good[:len(good)-1], "truncated"},
		"trailing":        {append(append([]byte(nil), good...), 0), "trailing bytes"},
		"term 0":          {encodeLease("a", 0, 1, inc), "term 0"},
		"term too large":  {encodeLease("a", maxLeaseTerm+1, 1, inc), "term too large"},
		"empty holder":    {encodeLease("", 1, 1, inc), "empty holder"},
		"long holder":     {encodeLease(strings.Repeat("h", record.MaxWriterLen+1), 1, 1, inc), "holder length"},
		"negative expiry": {encodeLease("a", 1, -1, inc), "negative expiry"},
		"a fence record":  {wholeRecord("id", "w", 1, record.Body{}), "magic"},
	}
	for name, c := range cases {
		_, check := decodeLease(c.b)
		assert.Equal(t, c.check, check, name)
	}
}

// wholeRecord returns a whole record, of format version 2, or 3 when body
// has references or a tenure floor, as a Fence writes it.
func wholeRecord(identity, writer string, epoch uint64, body record.Body) []byte {
	return bytes.Join(record.Encode(identity, writer, epoch, body, record.CRC32C(body.Payload)), nil)
}
