package writefence

import "encoding/binary"

// The lease record, format version 1. Integers are big-endian.
//
//	offset size  field
//	0      4     magic "WFL\x00"
//	4      1     format version (1)
//	5      2     holder length H (1..maxWriterLen)
//	7      8     term (1..maxLeaseTerm)
//	15     8     expiry, Unix nanoseconds (0 = released; never negative)
//	23     H     holder
//	23+H   4     CRC-32C of bytes [0, 23+H)
const (
	leaseMagic      = "WFL\x00"
	leaseVersion    = 1
	leaseHeaderSize = 23
)

type leaseRecord struct {
	holder string
	term   uint64
	expiry int64 // Unix nanoseconds; 0 when released
}

func encodeLease(holder string, term uint64, expiry int64) []byte {
	b := make([]byte, leaseHeaderSize, leaseHeaderSize+len(holder)+checksumSize)
	copy(b, leaseMagic)
	b[4] = leaseVersion
	binary.BigEndian.PutUint16(b[5:], uint16(len(holder)))
	binary.BigEndian.PutUint64(b[7:], term)
	binary.BigEndian.PutUint64(b[15:], uint64(expiry))
	b = append(b, holder...)
	return binary.BigEndian.AppendUint32(b, crc32Castagnoli(b))
}

// decodeLease decodes a lease record strictly; it returns the name of the
// failed check, or "".
func decodeLease(b []byte) (leaseRecord, string) {
	var r leaseRecord
	n := min(len(b), len(leaseMagic))
	switch {
	case string(b[:n]) != leaseMagic[:n]:
		return r, "magic"
	case len(b) < leaseHeaderSize+checksumSize:
		return r, "truncated"
	case b[4] != leaseVersion:
		return r, "unknown format version"
	}
	h := int(binary.BigEndian.Uint16(b[5:]))
	switch {
	case h == 0:
		return r, "empty holder"
	case h > maxWriterLen:
		return r, "holder length"
	case len(b) < leaseHeaderSize+h+checksumSize:
		return r, "truncated"
	case len(b) > leaseHeaderSize+h+checksumSize:
		return r, "trailing bytes"
	}
	end := leaseHeaderSize + h
	if binary.BigEndian.Uint32(b[end:]) != crc32Castagnoli(b[:end]) {
		return r, "checksum"
	}
	r.term = binary.BigEndian.Uint64(b[7:])
	r.expiry = int64(binary.BigEndian.Uint64(b[15:]))
	r.holder = string(b[leaseHeaderSize:end])
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
