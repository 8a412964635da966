package record

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestStreamRecordOfNoFloorIsCanonical: a record in format version 3 with
// since 0 and no references (a stream's record whose manifest holds no
// blob in its first tenure) is one the encoder writes, and re-encodes to
// exactly its bytes: there is one encoding of each record, as
// FuzzDecodeRecord states.
func TestStreamRecordOfNoFloorIsCanonical(t *testing.T) {
	payload := []byte("manifest")
	h := encodeHeaderV(StreamVersion, "writefence/v1", "node-1", 7, uint64(len(payload)), CRC32C(payload), 0, 0, nil)
	rec := append(h, payload...)

	dh, body, check := Decode(rec)
	if check == "" { // accepted: then it must be the one encoding of its record
		again := bytes.Join(Encode(dh.Identity, dh.Writer, dh.Epoch, body, CRC32C(body.Payload)), nil)
		assert.True(t, bytes.Equal(rec, again), "the decoded record re-encodes to the same bytes: format %d of %d bytes became format %d of %d bytes", rec[4], len(rec), again[4], len(again))
	}
}
