package writefence

import (
	"encoding/binary"

	"github.com/writefence/writefence/internal/record"
)

// The lease record, format version 2. Integers are big-endian.
//
//	offset size  field
//	0      4     magic "WFL\x00"
//	4      1     format version (2)
//	5      2     holder length H (1..record.MaxWriterLen)
//	7      8     term (1..maxLeaseTerm)
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
const (
	leaseMagic        = "WFL\x00"
	leaseVersion      = 2
	leaseHeaderSize   = 39
	leaseV1HeaderSize = 23
	leaseIncSize      = 16
)

type leaseRecord struct {
	holder      string
	term        uint64
	expiry      int64 // Unix nanoseconds; 0 when released
	incarnation [leaseIncSize]byte
}

func encodeLease(holder string, term uint64, expiry int64, incarnation [leaseIncSize]byte) []byte {
	b := make([]byte, leaseHeaderSize, leaseHeaderSize+len(holder)+record.ChecksumSize)
	copy(b, leaseMagic)
	b[4] = leaseVersion
	binary.BigEndian.PutUint16(b[5:], uint16(len(holder)))
	binary.BigEndian.PutUint64(b[7:], term)
	binary.BigEndian.PutUint64(b[15:], uint64(expiry))
	copy(b[23:], incarnation[:])
	b = append(b, holder...)
	return binary.BigEndian.AppendUint32(b, record.CRC32C(b))
}

// decodeLease decodes a lease record strictly; it returns the name of the
// failed check, or "".
func decodeLease(b []byte) (leaseRecord, string) {
	var r leaseRecord
	n := min(len(b), len(leaseMagic))
	switch {
	case string(b[:n]) != leaseMagic[:n]:
		return r, "magic"
	case len(b) < leaseV1HeaderSize+record.ChecksumSize:
		return r, "truncated"
	case b[4] != 1 && b[4] != leaseVersion:
		return r, "unknown format version"
	}
	size := leaseHeaderSize
	if b[4] == 1 {
		size = leaseV1HeaderSize
	}
	h := int(binary.BigEndian.Uint16(b[5:]))
	switch {
	case h == 0:
		return r, "empty holder"
	case h > record.MaxWriterLen:
		return r, "holder length"
	case len(b) < size+h+record.ChecksumSize:
		return r, "truncated"
	case len(b) > size+h+record.ChecksumSize:
		return r, "trailing bytes"
	}
	end := size + h
	if binary.BigEndian.Uint32(b[end:]) != record.CRC32C(b[:end]) {
		return r, "checksum"
	}
	r.term = binary.BigEndian.Uint64(b[7:])
	r.expiry = int64(binary.BigEndian.Uint64(b[15:]))
	if size == leaseHeaderSize {
		copy(r.incarnation[:], b[23:leaseHeaderSize])
	}
	r.holder = string(b[size:end])
	switch {
	case r.term == 0:
		return r, "term 0"
	case r.term > maxLeaseTerm:
		return r, "term too large"
	case r.expiry < 0:
		return r, "negative expiry"
	}
	return r, ""
}
