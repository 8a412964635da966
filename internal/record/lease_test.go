package record

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// leaseV1 encodes a lease record of format version 1, which writers no
// longer write and DecodeLease still reads: no incarnation, the holder at
// offset LeaseV1HeaderSize.
func leaseV1(holder string, term uint64, expiry int64) []byte {
	b := make([]byte, LeaseV1HeaderSize, LeaseV1HeaderSize+len(holder)+ChecksumSize)
	copy(b, LeaseMagic)
	b[4] = 1
	binary.BigEndian.PutUint16(b[5:], uint16(len(holder)))
	binary.BigEndian.PutUint64(b[7:], term)
	binary.BigEndian.PutUint64(b[15:], uint64(expiry))
	b = append(b, holder...)
	return binary.BigEndian.AppendUint32(b, CRC32C(b))
}

// FuzzDecodeLease: DecodeLease never panics; what it accepts has a holder,
// a term in range and no negative expiry, and is exactly the bytes its
// encoder writes for the lease it decoded (so no two byte strings decode
// to one lease of a format version); a record it refuses yields a check's
// name and no lease.
func FuzzDecodeLease(f *testing.F) {
	inc := [LeaseIncSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	f.Add(EncodeLease("node-1", 1, 0, inc))
	f.Add(EncodeLease("node-2", MaxLeaseTerm, 1_700_000_000_000_000_000, [LeaseIncSize]byte{}))
	f.Add(EncodeLease(string(bytes.Repeat([]byte{0xff}, MaxWriterLen)), 7, 1, inc))
	f.Add(leaseV1("old", 3, 42))
	f.Add(EncodeLease("node-1", 0, 0, inc))
	f.Add(EncodeLease("node-1", 1, -1, inc))
	f.Add([]byte(LeaseMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, check := DecodeLease(b)
		if check != "" {
			return
		}
		switch {
		case r.Holder == "" || len(r.Holder) > MaxWriterLen:
			t.Fatalf("accepted a holder of %d bytes", len(r.Holder))
		case r.Term == 0 || r.Term > MaxLeaseTerm:
			t.Fatalf("accepted term %d", r.Term)
		case r.Expiry < 0:
			t.Fatalf("accepted expiry %d", r.Expiry)
		}
		again := EncodeLease(r.Holder, r.Term, r.Expiry, r.Incarnation)
		if b[4] == 1 {
			again = leaseV1(r.Holder, r.Term, r.Expiry)
			if r.Incarnation != [LeaseIncSize]byte{} {
				t.Fatalf("a record of format version 1 decoded with incarnation %x", r.Incarnation)
			}
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded lease %+v re-encodes differently:\n%x\n%x", r, b, again)
		}
		if back, check := DecodeLease(EncodeLease(r.Holder, r.Term, r.Expiry, r.Incarnation)); check != "" || back != r {
			t.Fatalf("lease %+v encoded in format version %d decodes as %+v, %q", r, LeaseVersion, back, check)
		}
	})
}
