package writefence

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
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
// version 2, or 3 for a record of a shard that holds blobs (see Commit);
// readers read versions 1 to 3 and refuse any other.
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
// Format version 3 is version 2 with the blobs the record references and
// the epoch at which its writer's tenure began; the references follow the
// header, before the payload, and the header carries their checksum:
//
//	offset size  field
//	0      28    as in format version 2, with format version 3
//	28     8     since: the epoch the writer's tenure began (see Commit)
//	36     4     number of references N
//	40     8     length of the references R
//	48     4     CRC-32C of the references
//	52     I     identity
//	52+I   W     writer
//	52+I+W 4     CRC-32C of bytes [0, 52+I+W)
//	56+I+W R     N references: name length L (2), name (L), size (8),
//	             CRC-32C of the blob (4)
//	56+I+W+R P   payload
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
	streamVersion   = 3
	fixedHeaderSize = 28 // of format version 2
	v1HeaderSize    = 56 // of format version 1
	v3HeaderSize    = 52 // of format version 3
	checksumSize    = 4
)

// castagnoli is the one CRC-32C table: records, lease records, the GCS
// upload checksum and the directory store use it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the decoded header of a record.
type header struct {
	version    byte
	identity   string
	writer     string
	epoch      uint64
	payloadLen uint64
	payloadCRC uint32            // format versions 2 and 3
	digest     [sha256.Size]byte // format version 1
	size       int               // encoded header size, checksum included

	// Format version 3.
	since    uint64 // the epoch the writer's tenure began
	refCount uint32
	refsLen  uint64
	refsCRC  uint32
}

// bodyLen is the length of what follows the header: the references and
// the payload.
func (h header) bodyLen() uint64 { return h.refsLen + h.payloadLen }

// recordBody is what a record holds besides who wrote it at which epoch:
// its payload, the blobs it references and its tenure floor, and whether
// it is a stream's record (format version 3), which a shard's record
// stays once it was, references or not: a plain record (format version 2)
// carries no tenure floor of its own (see tenureFloor).
type recordBody struct {
	payload []byte
	refs    []BlobRef
	since   uint64
	stream  bool
}

// tenureFloor is the lowest epoch of a blob that a commit by the record's
// own writer may newly reference over the record of header h: the floor a
// stream's record carries, or, for a plain record, which carries none, its
// epoch (the highest a floor can be), so that no blob written before a
// plain record can be committed over it and Collect, which uses the same
// floor, never deletes one that can.
func tenureFloor(h header) uint64 {
	if h.version == streamVersion {
		return h.since
	}
	return h.epoch
}

// encodeHeader returns the encoded header of a record in format version 2
// whose payload is payloadLen bytes with checksum payloadCRC. The caller
// has validated the fields (non-empty, within the limits, epoch >= 1).
func encodeHeader(identity, writer string, epoch, payloadLen uint64, payloadCRC uint32) []byte {
	return encodeHeaderV(recordVersion, identity, writer, epoch, payloadLen, payloadCRC, 0, nil)
}

// encodeRecord returns the parts of a record of body: its header (and, in
// format version 3, its references) and its payload, which is not copied.
// payloadCRC is the payload's CRC-32C.
func encodeRecord(identity, writer string, epoch uint64, body recordBody, payloadCRC uint32) [][]byte {
	if !body.stream && len(body.refs) == 0 && body.since == 0 {
		return [][]byte{encodeHeader(identity, writer, epoch, uint64(len(body.payload)), payloadCRC), body.payload}
	}
	refs := encodeRefs(body.refs)
	h := encodeHeaderV(streamVersion, identity, writer, epoch, uint64(len(body.payload)), payloadCRC, body.since, refs)
	h = append(h, refs...)
	return [][]byte{h, body.payload}
}

func encodeHeaderV(version byte, identity, writer string, epoch, payloadLen uint64, payloadCRC uint32, since uint64, refs []byte) []byte {
	fixed := fixedHeaderSize
	if version == streamVersion {
		fixed = v3HeaderSize
	}
	end := fixed + len(identity) + len(writer)
	b := make([]byte, end+checksumSize, end+checksumSize+len(refs))
	copy(b, recordMagic)
	b[4] = version
	b[5] = byte(len(identity))
	binary.BigEndian.PutUint16(b[6:], uint16(len(writer)))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], payloadLen)
	binary.BigEndian.PutUint32(b[24:], payloadCRC)
	if version == streamVersion {
		binary.BigEndian.PutUint64(b[28:], since)
		binary.BigEndian.PutUint32(b[36:], uint32(countRefs(refs)))
		binary.BigEndian.PutUint64(b[40:], uint64(len(refs)))
		binary.BigEndian.PutUint32(b[48:], crc32Castagnoli(refs))
	}
	n := copy(b[fixed:], identity)
	copy(b[fixed+n:], writer)
	binary.BigEndian.PutUint32(b[end:], crc32Castagnoli(b[:end]))
	return b
}

// refEntryFixed is what a reference holds besides its name: the name's
// length, the size and the CRC-32C.
const refEntryFixed = 2 + 8 + 4

// encodeRefs encodes references, in the order given.
func encodeRefs(refs []BlobRef) []byte {
	n := 0
	for _, r := range refs {
		n += refEntryFixed + len(r.Name)
	}
	b := make([]byte, 0, n)
	for _, r := range refs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Name)))
		b = append(b, r.Name...)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Size))
		b = binary.BigEndian.AppendUint32(b, r.CRC)
	}
	return b
}

// countRefs returns how many references refs encodes; it is only called on
// refs encodeRefs made.
func countRefs(refs []byte) int {
	n := 0
	for len(refs) > 0 {
		l := int(binary.BigEndian.Uint16(refs))
		refs = refs[refEntryFixed+l:]
		n++
	}
	return n
}

// decodeRefs decodes the n references in b strictly: every entry whole,
// each name a blob name (see internal/keys), no name twice, no bytes left
// over. It returns the name of the failed check, or "".
func decodeRefs(b []byte, n uint32) ([]BlobRef, string) {
	refs := make([]BlobRef, 0, min(n, 1<<16))
	seen := make(map[string]bool, len(refs))
	for i := uint32(0); i < n; i++ {
		if len(b) < 2 {
			return nil, "truncated references"
		}
		l := int(binary.BigEndian.Uint16(b))
		if len(b) < refEntryFixed+l {
			return nil, "truncated references"
		}
		r := BlobRef{Name: string(b[2 : 2+l]), Size: int64(binary.BigEndian.Uint64(b[2+l:])), CRC: binary.BigEndian.Uint32(b[10+l:])}
		b = b[refEntryFixed+l:]
		if _, _, _, ok := keys.ParseBlobName(r.Name); !ok || r.Size < 0 {
			return nil, "reference"
		}
		if seen[r.Name] {
			return nil, "reference repeated"
		}
		seen[r.Name] = true
		refs = append(refs, r)
	}
	if len(b) != 0 {
		return nil, "trailing references"
	}
	return refs, ""
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
	case 3:
		fixed = v3HeaderSize
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
	if h.version == streamVersion {
		h.since = binary.BigEndian.Uint64(b[28:])
		h.refCount = binary.BigEndian.Uint32(b[36:])
		h.refsLen = binary.BigEndian.Uint64(b[40:])
		h.refsCRC = binary.BigEndian.Uint32(b[48:])
		if h.since > h.epoch {
			return header{}, "since above epoch"
		}
		if h.refsLen < uint64(h.refCount)*refEntryFixed || h.payloadLen > math.MaxUint64-h.refsLen {
			return header{}, "references length"
		}
	}
	h.identity = string(b[fixed : fixed+idLen])
	h.writer = string(b[fixed+idLen : end])
	h.size = end + checksumSize
	return h, ""
}

// decodeRecord decodes a whole record strictly: the header checks, then the
// length of what follows against the bytes present (truncation, trailing
// bytes), the references (format version 3) and the payload's checksum (or
// digest, in format version 1). The returned payload aliases b.
func decodeRecord(b []byte) (header, recordBody, string) {
	h, check := decodeHeader(b)
	if check != "" {
		return h, recordBody{}, check
	}
	rest := uint64(len(b) - h.size)
	switch {
	case h.bodyLen() > rest:
		return h, recordBody{}, "truncated payload"
	case h.bodyLen() < rest:
		return h, recordBody{}, "trailing bytes"
	}
	body := recordBody{since: h.since, stream: h.version == streamVersion, payload: b[uint64(h.size)+h.refsLen:]}
	if h.version == streamVersion {
		refs := b[h.size : uint64(h.size)+h.refsLen]
		if crc32Castagnoli(refs) != h.refsCRC {
			return h, recordBody{}, "references checksum"
		}
		if body.refs, check = decodeRefs(refs, h.refCount); check != "" {
			return h, recordBody{}, check
		}
	}
	switch {
	case h.version == 1 && sha256.Sum256(body.payload) != h.digest:
		return h, recordBody{}, "payload digest"
	case h.version != 1 && crc32Castagnoli(body.payload) != h.payloadCRC:
		return h, recordBody{}, "payload checksum"
	}
	return h, body, ""
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
