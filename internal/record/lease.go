package record

import "encoding/binary"

// The lease record, format version 2. Integers are big-endian.
//
//	offset size  field
//	0      4     magic "WFL\x00"
//	4      1     format version (2)
//	5      2     holder length H (1..MaxWriterLen)
//	7      8     term (1..MaxLeaseTerm)
//	15     8     expiry, Unix nanoseconds (0 = released; never negative)
//	23     16    incarnation: random bytes drawn once per Lease value
//	39     H     holder
//	39+H   4     CRC-32C of bytes [0, 39+H)
//
// The incarnation tells two Lease values of one Holder apart (a restarted
// process and the one it replaced), whose records could otherwise be the
// same bytes: a Lease takes a record for its own write only when it bears
// its own incarnation. Format version 1 (no incarnation, the holder at
// offset 23) still decodes, with a zero incarnation, which no Lease value
// has: a Lease never takes such a record for its own.
//
// MaxLeaseTerm is the highest term a lease record carries: a lease's
// epochs are term<<32 | n.
const MaxLeaseTerm = 1<<32 - 1

// The lease record's layout.
const (
	LeaseMagic        = "WFL\x00"
	LeaseVersion      = 2
	LeaseHeaderSize   = 39
	LeaseV1HeaderSize = 23
	LeaseIncSize      = 16
)

// Lease is a decoded lease record.
type Lease struct {
	Holder      string
	Term        uint64
	Expiry      int64 // Unix nanoseconds; 0 when released
	Incarnation [LeaseIncSize]byte
}

// EncodeLease encodes a lease record in format version 2.
func EncodeLease(holder string, term uint64, expiry int64, incarnation [LeaseIncSize]byte) []byte {
	b := make([]byte, LeaseHeaderSize, LeaseHeaderSize+len(holder)+ChecksumSize)
	copy(b, LeaseMagic)
	b[4] = LeaseVersion
	binary.BigEndian.PutUint16(b[5:], uint16(len(holder)))
	binary.BigEndian.PutUint64(b[7:], term)
	binary.BigEndian.PutUint64(b[15:], uint64(expiry))
	copy(b[23:], incarnation[:])
	b = append(b, holder...)
	return binary.BigEndian.AppendUint32(b, CRC32C(b))
}

// DecodeLease decodes a lease record strictly; it returns the name of the
// failed check, or "".
func DecodeLease(b []byte) (Lease, string) {
	var r Lease
	n := min(len(b), len(LeaseMagic))
	switch {
	case string(b[:n]) != LeaseMagic[:n]:
		return r, "magic"
	case len(b) < LeaseV1HeaderSize+ChecksumSize:
		return r, "truncated"
	case b[4] != 1 && b[4] != LeaseVersion:
		return r, "unknown format version"
	}
	size := LeaseHeaderSize
	if b[4] == 1 {
		size = LeaseV1HeaderSize
	}
	h := int(binary.BigEndian.Uint16(b[5:]))
	switch {
	case h == 0:
		return r, "empty holder"
	case h > MaxWriterLen:
		return r, "holder length"
	case len(b) < size+h+ChecksumSize:
		return r, "truncated"
	case len(b) > size+h+ChecksumSize:
		return r, "trailing bytes"
	}
	end := size + h
	if binary.BigEndian.Uint32(b[end:]) != CRC32C(b[:end]) {
		return r, "checksum"
	}
	r.Term = binary.BigEndian.Uint64(b[7:])
	r.Expiry = int64(binary.BigEndian.Uint64(b[15:]))
	if size == LeaseHeaderSize {
		copy(r.Incarnation[:], b[23:LeaseHeaderSize])
	}
	r.Holder = string(b[size:end])
	switch {
	case r.Term == 0:
		return r, "term 0"
	case r.Term > MaxLeaseTerm:
		return r, "term too large"
	case r.Expiry < 0:
		return r, "negative expiry"
	}
	return r, ""
}
