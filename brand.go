package writefence

import (
	"context"
)

// The brand is the store-level wire identity: one reserved key per prefix,
// the brand key (Fence.Prefix + "_brand"), that holds the identity of the
// format the store's records are written in. A Fence checks it before it
// writes (Fence.Brand), so a program that does not speak a store's format
// never writes to it. Records carry the identity too (Fence.Identity); the
// brand refuses a foreign program at start-up, before it touches any
// record, and covers stores that hold no record yet.
//
// The brand key's data, as the store's Get returns it, is exactly the
// identity's bytes: no header, no newline, no encoding, so any program of
// any format can read a brand through any ConditionalStore. What the store
// itself holds depends on the store. An S3 or GCS object, an Azure blob, an
// etcd value and a MemStore entry hold the identity's bytes alone. The
// stores that keep their version beside the data hold them inside their
// own layout: a Valkey value starts with the adapter's header (a magic, a
// digest of the value and its version token) before the identity's bytes;
// a directory store's file holds its header, the key and a checksum around
// them; a DynamoDB item and a PostgreSQL row keep a version and a digest
// beside them. So brand a store through the store, with Fence.ClaimBrand
// (or Fence.Brand set to BrandClaim) or the command's "writefence brand
// install", which write the Fence's identity through the store's own
// PutIfVersion. A brand written with the store's own client (SET on
// Valkey, a file written by hand) is bytes the store reads as damaged in
// place on Valkey and the directory store, and the brand check then fails
// with that damage, not with a refusal. Any other
// content, including an empty value, bytes that are not UTF-8 or a value far
// longer than an identity, is "another value": a refusal that names what
// was found, escaped and cut short, never "absent".
//
// A refusal is a *WireError, which matches ErrWire, and is final: nothing
// in the package retries it, because reading again will not change the
// answer. Any other failure (a network error, a permission error, a key of
// the wrong type on Valkey, an object over the store's read limit) is
// returned wrapped, is never reported as a refusal or as "absent", and may
// be retried by the caller; a cancelled or expired ctx is returned as is.

// ClaimBrand brands an empty store with the Fence's identity, through the
// engine (Op "brand claim"), and reports whether this call wrote the brand.
// A brand of the identity returns false (so does a claim whose reply was
// lost: two claimers never both report true), another value a *WireError,
// both writing nothing; an absent brand is created and read back, and the
// read decides, so of claimers racing an empty store one write lands and
// every claimer of another identity gets a *WireError (promise 11). It
// never overwrites a brand: an operator removes the brand key first.
func (f *Fence) ClaimBrand(ctx context.Context) (claimed bool, err error) {
	return f.engine().claimBrand(ctx)
}

// VerifyBrand reads the brand key and returns nil if it holds the Fence's
// identity, else a *WireError (Absent set when there is none); any other
// failure is returned wrapped, never read as absent (promise 33).
func (f *Fence) VerifyBrand(ctx context.Context) error {
	return f.engine().verifyBrandRetried(ctx)
}
