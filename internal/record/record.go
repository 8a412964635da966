// Package record encodes and decodes the records a Fence writes: the
// header that says who wrote a record at which epoch, the blobs a stream's
// record references and its tenure floor, and the checksums over them.
package record

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
)

// MaxHeaderSize bounds the encoded header of a record. Every header fits in
// it, so reading this many bytes from the start of a record always yields
// the whole header.
const MaxHeaderSize = defaults.MaxHeaderSize

// Limits on the names carried in a record header.
const (
	MaxIdentityLen = 255  // bytes in a wire identity
	MaxWriterLen   = 1024 // bytes in a writer name
)

// The record encoding. All integers are big-endian. Writers write format
// version 2, or for a record of a shard that holds blobs (see
// writefence.Fence.Commit) version 3, or 4 once garbage collection has
// set the record's horizon; readers read versions 1 to 4 and refuse any
// other.
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
//	28     8     since: the epoch the writer's tenure began
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
// Format version 4 is version 3 with the record's collection horizon, a
// time by the blob store's clock in Unix nanoseconds: a blob created before
// it that the record does not reference is garbage, and no commit may
// newly reference it (see writefence.Fence.Collect):
//
//	offset size  field
//	0      52    as in format version 3, with format version 4
//	52     8     horizon (> 0)
//	60     I     identity
//	60+I   W     writer
//	60+I+W 4     CRC-32C of bytes [0, 60+I+W)
//	64+I+W R     references, as in format version 3
//	64+I+W+R P   payload
//
// The header checksum covers every header field, the payload's checksum
// among them, so together they check the header and the payload, and the
// header alone can be checked without the payload. The payload's checksum
// catches damage; it does not identify a push: the replay rule compares the
// payload itself (see writefence.Fence.Push). CRC-32C runs in hardware at
// memory speed, so a push makes one cheap pass over its payload
// (BENCHMARKS.md).
const (
	recordMagic     = "WFR\x00"
	PlainVersion    = 2  // of a plain record
	StreamVersion   = 3  // of a stream's record
	HorizonVersion  = 4  // of a stream's record with a collection horizon
	fixedHeaderSize = 28 // of format version 2
	v1HeaderSize    = 56 // of format version 1
	v3HeaderSize    = 52 // of format version 3
	v4HeaderSize    = 60 // of format version 4
	ChecksumSize    = 4  // of each CRC-32C
)

// Castagnoli is the one CRC-32C table: records, lease records, the GCS
// upload checksum and the directory store use it.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded header of a record.
type Header struct {
	Version    byte
	Identity   string
	Writer     string
	Epoch      uint64
	PayloadLen uint64
	PayloadCRC uint32            // format versions 2 and 3
	Digest     [sha256.Size]byte // format version 1
	Size       int               // encoded header size, checksum included

	// Format versions 3 and 4.
	Since    uint64 // the epoch the writer's tenure began
	RefCount uint32
	RefsLen  uint64
	RefsCRC  uint32

	// Format version 4: the collection horizon, Unix nanoseconds by the
	// blob store's clock; 0 in the other versions.
	Horizon int64
}

// Stream reports whether h is the header of a stream's record (format
// version 3 or 4).
func (h Header) Stream() bool { return h.Version == StreamVersion || h.Version == HorizonVersion }

// BodyLen is the length of what follows the header: the references and
// the payload.
func (h Header) BodyLen() uint64 { return h.RefsLen + h.PayloadLen }

// BlobRef is a record's reference to a blob of its shard: the blob's name
// and what checks its bytes. The name carries the epoch and the writer
// that wrote the blob.
type BlobRef struct {
	Name string // the blob's name in the shard's blob space, as PutBlob returned it
	Size int64  // its size in bytes
	CRC  uint32 // the CRC-32C of its bytes
}

// Body is what a record holds besides who wrote it at which epoch:
// its payload, the blobs it references, its tenure floor and collection
// horizon, and whether it is a stream's record (format version 3 or 4),
// which a shard's record stays once it was, references or not: a plain
// record (format version 2) carries no tenure floor of its own (see
// TenureFloor) and no horizon.
type Body struct {
	Payload []byte
	Refs    []BlobRef
	Since   uint64
	Horizon int64 // Unix nanoseconds by the blob store's clock; 0 for none
	Stream  bool
}

// TenureFloor is the lowest epoch of a blob that a commit by the record's
// own writer may newly reference over the record of header h: the floor a
// stream's record carries, or, for a plain record, which carries none, its
// epoch (the highest a floor can be), so that no blob written before a
// plain record can be committed over it and Collect, which uses the same
// floor, never deletes one that can.
func TenureFloor(h Header) uint64 {
	if h.Stream() {
		return h.Since
	}
	return h.Epoch
}

// EncodeHeader returns the encoded header of a record in format version 2
// whose payload is payloadLen bytes with checksum payloadCRC. The caller
// has validated the fields (non-empty, within the limits, epoch >= 1).
func EncodeHeader(identity, writer string, epoch, payloadLen uint64, payloadCRC uint32) []byte {
	return encodeHeaderV(PlainVersion, identity, writer, epoch, payloadLen, payloadCRC, 0, 0, nil)
}

// Encode returns the parts of a record of body: its header (and, in
// format version 3, its references) and its payload, which is not copied.
// payloadCRC is the payload's CRC-32C.
func Encode(identity, writer string, epoch uint64, body Body, payloadCRC uint32) [][]byte {
	if !body.Stream && len(body.Refs) == 0 && body.Since == 0 && body.Horizon == 0 {
		return [][]byte{EncodeHeader(identity, writer, epoch, uint64(len(body.Payload)), payloadCRC), body.Payload}
	}
	refs := encodeRefs(body.Refs)
	version := byte(StreamVersion)
	if body.Horizon != 0 {
		version = HorizonVersion
	}
	h := encodeHeaderV(version, identity, writer, epoch, uint64(len(body.Payload)), payloadCRC, body.Since, body.Horizon, refs)
	h = append(h, refs...)
	return [][]byte{h, body.Payload}
}

// EncodeV1 returns a whole record of format version 1, as earlier releases
// wrote it: a SHA-256 of the payload where version 2 has its CRC-32C.
// Writers no longer write it; readers still read it, and their tests need
// records to read.
func EncodeV1(identity, writer string, epoch uint64, payload []byte) []byte {
	end := v1HeaderSize + len(identity) + len(writer)
	b := make([]byte, end+ChecksumSize, end+ChecksumSize+len(payload))
	copy(b, recordMagic)
	b[4] = 1
	b[5] = byte(len(identity))
	binary.BigEndian.PutUint16(b[6:], uint16(len(writer)))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], uint64(len(payload)))
	digest := sha256.Sum256(payload)
	copy(b[24:], digest[:])
	n := copy(b[v1HeaderSize:], identity)
	copy(b[v1HeaderSize+n:], writer)
	binary.BigEndian.PutUint32(b[end:], CRC32C(b[:end]))
	return append(b, payload...)
}

func encodeHeaderV(version byte, identity, writer string, epoch, payloadLen uint64, payloadCRC uint32, since uint64, horizon int64, refs []byte) []byte {
	fixed := fixedHeaderSize
	switch version {
	case StreamVersion:
		fixed = v3HeaderSize
	case HorizonVersion:
		fixed = v4HeaderSize
	}
	end := fixed + len(identity) + len(writer)
	b := make([]byte, end+ChecksumSize, end+ChecksumSize+len(refs))
	copy(b, recordMagic)
	b[4] = version
	b[5] = byte(len(identity))
	binary.BigEndian.PutUint16(b[6:], uint16(len(writer)))
	binary.BigEndian.PutUint64(b[8:], epoch)
	binary.BigEndian.PutUint64(b[16:], payloadLen)
	binary.BigEndian.PutUint32(b[24:], payloadCRC)
	if version >= StreamVersion {
		binary.BigEndian.PutUint64(b[28:], since)
		binary.BigEndian.PutUint32(b[36:], uint32(countRefs(refs)))
		binary.BigEndian.PutUint64(b[40:], uint64(len(refs)))
		binary.BigEndian.PutUint32(b[48:], CRC32C(refs))
	}
	if version == HorizonVersion {
		binary.BigEndian.PutUint64(b[52:], uint64(horizon))
	}
	n := copy(b[fixed:], identity)
	copy(b[fixed+n:], writer)
	binary.BigEndian.PutUint32(b[end:], CRC32C(b[:end]))
	return b
}

// RefEntryFixed is what a reference holds besides its name: the name's
// length, the size and the CRC-32C.
const RefEntryFixed = 2 + 8 + 4

// encodeRefs encodes references, in the order given.
func encodeRefs(refs []BlobRef) []byte {
	n := 0
	for _, r := range refs {
		n += RefEntryFixed + len(r.Name)
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
		refs = refs[RefEntryFixed+l:]
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
		if len(b) < RefEntryFixed+l {
			return nil, "truncated references"
		}
		r := BlobRef{Name: string(b[2 : 2+l]), Size: int64(binary.BigEndian.Uint64(b[2+l:])), CRC: binary.BigEndian.Uint32(b[10+l:])}
		b = b[RefEntryFixed+l:]
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

// DecodeHeader decodes and checks the header at the start of b, which may
// hold the whole record or only its beginning. It returns the name of the
// failed check, or "" when the header is sound.
func DecodeHeader(b []byte) (Header, string) {
	var h Header
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
	case 4:
		fixed = v4HeaderSize
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
	if wLen > MaxWriterLen {
		return h, "writer length"
	}
	end := fixed + idLen + wLen
	if len(b) < end+ChecksumSize {
		return h, "truncated header"
	}
	if binary.BigEndian.Uint32(b[end:]) != CRC32C(b[:end]) {
		return h, "header checksum"
	}
	h.Epoch = binary.BigEndian.Uint64(b[8:])
	if h.Epoch == 0 {
		return h, "epoch 0"
	}
	h.Version = b[4]
	h.PayloadLen = binary.BigEndian.Uint64(b[16:])
	if h.Version == 1 {
		copy(h.Digest[:], b[24:v1HeaderSize])
	} else {
		h.PayloadCRC = binary.BigEndian.Uint32(b[24:])
	}
	if h.Stream() {
		h.Since = binary.BigEndian.Uint64(b[28:])
		h.RefCount = binary.BigEndian.Uint32(b[36:])
		h.RefsLen = binary.BigEndian.Uint64(b[40:])
		h.RefsCRC = binary.BigEndian.Uint32(b[48:])
		if h.Since > h.Epoch {
			return Header{}, "since above epoch"
		}
		if h.RefsLen < uint64(h.RefCount)*RefEntryFixed || h.PayloadLen > math.MaxUint64-h.RefsLen {
			return Header{}, "references length"
		}
	}
	if h.Version == HorizonVersion {
		h.Horizon = int64(binary.BigEndian.Uint64(b[52:]))
		if h.Horizon <= 0 {
			return Header{}, "horizon"
		}
	}
	h.Identity = string(b[fixed : fixed+idLen])
	h.Writer = string(b[fixed+idLen : end])
	h.Size = end + ChecksumSize
	return h, ""
}

// Decode decodes a whole record strictly: the header checks, then the
// length of what follows against the bytes present (truncation, trailing
// bytes), the references (format version 3) and the payload's checksum (or
// digest, in format version 1). The returned payload aliases b.
func Decode(b []byte) (Header, Body, string) {
	h, check := DecodeHeader(b)
	if check != "" {
		return h, Body{}, check
	}
	rest := uint64(len(b) - h.Size)
	switch {
	case h.BodyLen() > rest:
		return h, Body{}, "truncated payload"
	case h.BodyLen() < rest:
		return h, Body{}, "trailing bytes"
	}
	body := Body{Since: h.Since, Horizon: h.Horizon, Stream: h.Stream(), Payload: b[uint64(h.Size)+h.RefsLen:]}
	if h.Stream() {
		if body.Refs, check = refsOf(h, b); check != "" {
			return h, Body{}, check
		}
	}
	switch {
	case h.Version == 1 && sha256.Sum256(body.Payload) != h.Digest:
		return h, Body{}, "payload digest"
	case h.Version != 1 && CRC32C(body.Payload) != h.PayloadCRC:
		return h, Body{}, "payload checksum"
	}
	return h, body, ""
}

// refsOf decodes the references of the stream's record with header h from
// b, the record or its beginning: they must be there whole and match their
// checksum.
func refsOf(h Header, b []byte) ([]BlobRef, string) {
	if uint64(len(b)-h.Size) < h.RefsLen {
		return nil, "truncated references"
	}
	refs := b[h.Size : uint64(h.Size)+h.RefsLen]
	if CRC32C(refs) != h.RefsCRC {
		return nil, "references checksum"
	}
	return decodeRefs(refs, h.RefCount)
}

// HeadRefs decodes the references of the stream's record with header h
// from b, the record's beginning, as a Push that reads only the head of
// a record needs them: complete is false when b ends before they do;
// check names a failed check of references that b holds whole.
func HeadRefs(h Header, b []byte) (refs []BlobRef, complete bool, check string) {
	if uint64(len(b)-h.Size) < h.RefsLen {
		return nil, false, ""
	}
	refs, check = refsOf(h, b)
	return refs, true, check
}

// DecidedOnHead reports whether a Push over the record b, on a store that
// reads prefixes, decides on the record's head without its payload: b is
// longer than what the Push reads (MaxHeaderSize bytes, or the header and
// the references when they run past them), and that head is sound: the
// header and the references decode and match their checksums, and b is
// as long as the header says. A record b damaged in its payload alone is
// then replaced by such a Push.
func DecidedOnHead(b []byte) bool {
	h, check := DecodeHeader(b)
	if check != "" || uint64(len(b)-h.Size) != h.BodyLen() {
		return false
	}
	if uint64(len(b)) <= max(MaxHeaderSize, uint64(h.Size)+h.RefsLen) {
		return false
	}
	if !h.Stream() {
		return true
	}
	_, complete, check := HeadRefs(h, b)
	return complete && check == ""
}

// SalvageRefs returns the references of a record that may be damaged
// further on: b is the record, or as much of its beginning as could be
// read, and the references count when its header and its references
// decode and match their checksums, whatever follows them (a payload that
// fails its checksum, say). ok is false when they cannot be known; a plain
// record has none (refs nil, ok true).
func SalvageRefs(b []byte) (refs []BlobRef, ok bool) {
	h, check := DecodeHeader(b)
	if check != "" {
		return nil, false
	}
	if !h.Stream() {
		return nil, true
	}
	refs, check = refsOf(h, b)
	return refs, check == ""
}

// CRC32C returns the CRC-32C of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, Castagnoli) }
