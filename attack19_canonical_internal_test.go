package writefence

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAttack19StreamRecordOfNoFloorDecodes shows the decoder accepting a
// record in format version 3 that no writer of the package produces and
// that re-encodes to other bytes (promise: decoding is strict; the fuzz
// target FuzzDecodeRecord states that whatever the decoder accepts
// re-encodes to exactly the same bytes, "there is one encoding of each
// record").
//
// Sequence: a format version 3 header with since 0, no references and a
// payload, with every checksum right (an input a fuzzer reaches only by
// also fixing the header CRC, which is why FuzzDecodeRecord has not).
// The encoder writes that body (since 0, no references) in format
// version 2, so the version 3 bytes are a second encoding of it.
//
// Expected: decodeRecord refuses it as corrupt (or the encoder writes it,
// so there is one encoding).
// Observed: decodeRecord accepts it, and re-encoding gives a format 2
// record of other bytes.
func TestAttack19StreamRecordOfNoFloorDecodes(t *testing.T) {
	payload := []byte("manifest")
	h := encodeHeaderV(streamVersion, "writefence/v1", "node-1", 7, uint64(len(payload)), crc32Castagnoli(payload), 0, nil)
	rec := append(h, payload...)

	dh, body, check := decodeRecord(rec)
	if check == "" { // accepted: then it must be the one encoding of its record
		again := bytes.Join(encodeRecord(dh.identity, dh.writer, dh.epoch, body, crc32Castagnoli(body.payload)), nil)
		assert.True(t, bytes.Equal(rec, again), "the decoded record re-encodes to the same bytes: format %d of %d bytes became format %d of %d bytes", rec[4], len(rec), again[4], len(again))
	}
}
