package writefence

import "github.com/writefence/writefence/internal/record"

// The lease record's format lives in internal/record (see record.Lease),
// where the tests' checker reads it too.
type leaseRecord = record.Lease

const (
	leaseMagic        = record.LeaseMagic
	leaseVersion      = record.LeaseVersion
	leaseHeaderSize   = record.LeaseHeaderSize
	leaseV1HeaderSize = record.LeaseV1HeaderSize
	leaseIncSize      = record.LeaseIncSize
)

var (
	encodeLease = record.EncodeLease
	decodeLease = record.DecodeLease
)
