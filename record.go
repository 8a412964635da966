package writefence

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
)

// DefaultMaxPayloadSize is the largest payload a Fence accepts when
// Fence.MaxPayloadSize is zero: 64 MiB.
const DefaultMaxPayloadSize = 64 << 20

// MaxHeaderSize bounds the encoded header of a record. Every header fits in
// it, so reading this many bytes from the start of a record always yields
// the whole header.
const MaxHeaderSize = 4 << 10

// Limits on the names carried in a record header.
const (
	MaxIdentityLen = 255  // bytes in a wire identity
	MaxWriterLen   = 1024 // bytes in a writer name
)

// The record encoding, format version 1. All integers are big-endian.
//
//	offset size  field
//	0      4     magic "WFR\x00"
//	4      1     format version (1)
//	5      1     identity length I (1..255)
//	6      2     writer length W (1..1024)
//	8      8     epoch (>= 1)
//	16     8     payload length P
//	24     32    SHA-256 of the payload
//	56     I     identity
//	56+I   W     writer
//	56+I+W 4     CRC-32C of bytes [0, 56+I+W)
//	60+I+W P     payload
//
// The header checksum covers every header field, the payload digest among
// them, so together they check the header and the payload; the header alone
// can be checked without the payload, and the digest identifies a payload
// for the replay rule without holding it.
const (
	recordMagic     = "WFR\x00"
	recordVersion   = 1
	fixedHeaderSize = 56
	checksumSize    = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the decoded header of a record.
type header struct {
	identity   string
	writer     string
	epoch      uint64
	payloadLen uint64
	digest     [sha256.Size]byte
	size       int // encoded header size, checksum included
}

// encodeRecord returns the encoded record for the given fields. The caller
// has validated them (non-empty, within the limits, epoch >= 1).
func encodeRecord(identity, writer string, epoch uint64, digest [sha256.Size]byte, payload []byte) []byte {
	hsize := fixedHeaderSize + len(identity) + len(writer) + checksumSize
	b := make([]byte, hsize, hsize+len(payload))
	copy(b, recordMagic)
	b[4] = recordVersion
	b[5] = byte(len(identity))
	binary.BigEndian.PutUint16(b[6:], uint16(len(writer)))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], uint64(len(payload)))
	copy(b[24:56], digest[:])
	n := copy(b[fixedHeaderSize:], identity)
	n += copy(b[fixedHeaderSize+n:], writer)
	end := fixedHeaderSize + n
	binary.BigEndian.PutUint32(b[end:], crc32Castagnoli(b[:end]))
	return append(b, payload...)
}

// decodeHeader decodes and checks the header at the start of b, which may
// hold the whole record or only its beginning. It returns the name of the
// failed check, or "" when the header is sound.
func decodeHeader(b []byte) (header, string) {
	var h header
	n := min(len(b), len(recordMagic))
	if string(b[:n]) != recordMagic[:n] {
		return h, "magic"
	}
	if len(b) < fixedHeaderSize {
		return h, "truncated header"
	}
	if b[4] != recordVersion {
		return h, "unknown format version"
	}
	idLen := int(b[5])
	wLen := int(binary.BigEndian.Uint16(b[6:]))
	if idLen == 0 {
		return h, "empty identity"
	}
	if wLen == 0 {
		return h, "empty writer"
	}
	if wLen > MaxWriterLen {
		return h, "writer length"
	}
	end := fixedHeaderSize + idLen + wLen
	if len(b) < end+checksumSize {
		return h, "truncated header"
	}
	if binary.BigEndian.Uint32(b[end:]) != crc32Castagnoli(b[:end]) {
		return h, "header checksum"
	}
	h.epoch = binary.BigEndian.Uint64(b[8:])
	if h.epoch == 0 {
		return h, "epoch 0"
	}
	h.payloadLen = binary.BigEndian.Uint64(b[16:])
	copy(h.digest[:], b[24:56])
	h.identity = string(b[fixedHeaderSize : fixedHeaderSize+idLen])
	h.writer = string(b[fixedHeaderSize+idLen : end])
	h.size = end + checksumSize
	return h, ""
}

// decodeRecord decodes a whole record strictly: the header checks, then the
// payload length against the bytes present (truncation, trailing bytes) and
// the payload digest. The returned payload aliases b.
func decodeRecord(b []byte) (header, []byte, string) {
	h, check := decodeHeader(b)
	if check != "" {
		return h, nil, check
	}
	rest := uint64(len(b) - h.size)
	switch {
	case h.payloadLen > rest:
		return h, nil, "truncated payload"
	case h.payloadLen < rest:
		return h, nil, "trailing bytes"
	}
	payload := b[h.size:]
	if sha256.Sum256(payload) != h.digest {
		return h, nil, "payload digest"
	}
	return h, payload, ""
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
