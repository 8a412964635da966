package writefence

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"

	"github.com/writefence/writefence/internal/defaults"
)

// maxHeaderSize bounds the encoded header of a record. Every header fits in
// it, so reading this many bytes from the start of a record always yields
// the whole header.
const maxHeaderSize = defaults.MaxHeaderSize

// Limits on the names carried in a record header.
const (
	maxIdentityLen = 255  // bytes in a wire identity
	maxWriterLen   = 1024 // bytes in a writer name
)

// The record encoding. All integers are big-endian. Writers write format
// version 2; readers read versions 1 and 2 and refuse any other.
//
// Format version 2:
//
//	offset size  field
//	0      4     magic "WFR\x00"
//	4      1     format version (2)
//	5      1     identity length I (1..255)
//	6      2     writer length W (1..1024)
//	8      8     epoch (>= 1)
//	16     8     payload length P
//	24     4     CRC-32C of the payload
//	28     I     identity
//	28+I   W     writer
//	28+I+W 4     CRC-32C of bytes [0, 28+I+W)
//	32+I+W P     payload
//
// Format version 1 is the same but for its payload digest, a SHA-256 in the
// 32 bytes at offset 24, so that its identity starts at offset 56.
//
// The header checksum covers every header field, the payload's checksum
// among them, so together they check the header and the payload, and the
// header alone can be checked without the payload. The payload's checksum
// catches damage; it does not identify a push: the replay rule compares the
// payload itself (see Fence.Push). CRC-32C runs in hardware at memory speed,
// so a push makes one cheap pass over its payload (BENCHMARKS.md).
const (
	recordMagic     = "WFR\x00"
	recordVersion   = 2
	fixedHeaderSize = 28 // of format version 2
	v1HeaderSize    = 56 // of format version 1
	checksumSize    = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the decoded header of a record.
type header struct {
	version    byte
	identity   string
	writer     string
	epoch      uint64
	payloadLen uint64
	payloadCRC uint32            // format version 2
	digest     [sha256.Size]byte // format version 1
	size       int               // encoded header size, checksum included
}

// encodeHeader returns the encoded header of a record whose payload is
// payloadLen bytes with checksum payloadCRC. The caller has validated the
// fields (non-empty, within the limits, epoch >= 1).
func encodeHeader(identity, writer string, epoch, payloadLen uint64, payloadCRC uint32) []byte {
	end := fixedHeaderSize + len(identity) + len(writer)
	b := make([]byte, end+checksumSize)
	copy(b, recordMagic)
	b[4] = recordVersion
	b[5] = byte(len(identity))
	binary.BigEndian.PutUint16(b[6:], uint16(len(writer)))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], payloadLen)
	binary.BigEndian.PutUint32(b[24:], payloadCRC)
	n := copy(b[fixedHeaderSize:], identity)
	copy(b[fixedHeaderSize+n:], writer)
	binary.BigEndian.PutUint32(b[end:], crc32Castagnoli(b[:end]))
	return b
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
	fixed := 0
	switch b[4] {
	case 1:
		fixed = v1HeaderSize
	case 2:
		fixed = fixedHeaderSize
	default:
		return h, "unknown format version"
	}
	if len(b) < fixed {
		return h, "truncated header"
	}
	idLen := int(b[5])
	wLen := int(binary.BigEndian.Uint16(b[6:]))
	if idLen == 0 {
		return h, "empty identity"
	}
	if wLen == 0 {
		return h, "empty writer"
	}
	if wLen > maxWriterLen {
		return h, "writer length"
	}
	end := fixed + idLen + wLen
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
	h.version = b[4]
	h.payloadLen = binary.BigEndian.Uint64(b[16:])
	if h.version == 1 {
		copy(h.digest[:], b[24:v1HeaderSize])
	} else {
		h.payloadCRC = binary.BigEndian.Uint32(b[24:])
	}
	h.identity = string(b[fixed : fixed+idLen])
	h.writer = string(b[fixed+idLen : end])
	h.size = end + checksumSize
	return h, ""
}

// decodeRecord decodes a whole record strictly: the header checks, then the
// payload length against the bytes present (truncation, trailing bytes) and
// the payload's checksum (or digest, in format version 1). The returned
// payload aliases b.
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
	switch {
	case h.version == 1 && sha256.Sum256(payload) != h.digest:
		return h, nil, "payload digest"
	case h.version != 1 && crc32Castagnoli(payload) != h.payloadCRC:
		return h, nil, "payload checksum"
	}
	return h, payload, ""
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
