package writefence

import (
	"context"
	"errors"
	"fmt"

	"github.com/writefence/writefence/internal/keys"
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

// BrandMode says when a Fence checks the store's brand; the zero value
// never. A record's own identity is checked on every write whatever the
// mode.
type BrandMode int

// The brand modes.
const (
	// BrandVerify, for a store branded by a separate step (ClaimBrand at
	// deploy time, "writefence brand install"), verifies the brand before
	// the Fence's first write or Latest and keeps the verdict.
	BrandVerify BrandMode = iota + 1

	// BrandClaim, for writers that create their stores, claims the brand
	// (see ClaimBrand) before the Fence's first write. Latest neither
	// claims nor verifies; it returns a refused claim's refusal.
	BrandClaim

	// BrandVerifyAlways, for a store re-branded while writers run,
	// verifies the brand on every write and Latest: in the write's own
	// atomic step on a BrandedPutter (Valkey, etcdstore), else by a read
	// right before it, which leaves a gap in which one write may land.
	BrandVerifyAlways
)

// ClaimBrand brands an empty store with the Fence's identity, through the
// engine (Op "brand claim"), and reports whether this call wrote the brand.
// A brand of the identity returns false (so does a claim whose reply was
// lost: two claimers never both report true), another value a *WireError,
// both writing nothing; an absent brand is created and read back, and the
// read decides, so of claimers racing an empty store one write lands and
// every claimer of another identity gets a *WireError (promise 11). It
// never overwrites a brand: an operator removes the brand key first.
func (f *Fence) ClaimBrand(ctx context.Context) (claimed bool, err error) {
	key, err := f.brandKey()
	if err != nil {
		return false, err
	}
	identity := f.identity()
	out, err := f.run(ctx, &change{op: opBrandClaim, key: key, decide: func(s *snapshot) ([][]byte, bool, error) {
		switch {
		case s.damage != nil:
			return nil, false, fmt.Errorf("writefence: brand: read %s: %w", esc(key), s.damage)
		case !s.found:
			return [][]byte{[]byte(identity)}, false, nil
		}
		return nil, true, compareBrand(key, identity, s.data, true)
	}})
	if err != nil || !out.wrote {
		return false, err
	}
	// The confirming read: a store that acknowledged the create must show
	// it.
	err = f.VerifyBrand(ctx)
	if we := (*WireError)(nil); errors.As(err, &we) && we.Absent {
		// Written and gone by the time of the read: something deletes the
		// brand key. Not a refusal: nothing was found to refuse.
		return false, fmt.Errorf("writefence: brand: claim %s: the brand key is absent right after the claim", esc(key))
	}
	return err == nil, err
}

// VerifyBrand reads the brand key and returns nil if it holds the Fence's
// identity; it never writes. An absent brand key is refused with a
// *WireError whose Absent is set, another value with a *WireError naming
// it; any other failure is returned wrapped, never read as absent.
func (f *Fence) VerifyBrand(ctx context.Context) error {
	key, err := f.brandKey()
	if err != nil {
		return err
	}
	err = f.brandRead(ctx)
	var rf readFailure
	switch {
	case !errors.As(err, &rf):
		return err
	case isContextErr(rf.err):
		return rf.err
	}
	return fmt.Errorf("writefence: brand: read %s: %w", esc(key), rf.err)
}

// brandKey validates the configuration a brand check needs and returns
// the brand key.
func (f *Fence) brandKey() (string, error) {
	if err := f.checkConfig(); err != nil {
		return "", err
	}
	key := keys.Brand(f.Prefix)
	if len(key) > keys.MaxKeyLen {
		return "", invalidArg("prefix", "the brand key is %d bytes, more than %d", len(key), keys.MaxKeyLen)
	}
	return key, nil
}

// compareBrand is the one comparison of a brand key's content with an
// identity, shared by the Fence and the Valkey adapter's in-transaction
// check.
func compareBrand(key, identity string, data []byte, exists bool) error {
	switch {
	case !exists:
		return &WireError{Key: key, Expected: identity, Absent: true}
	case string(data) != identity:
		return &WireError{Key: key, Expected: identity, Found: string(data)}
	}
	return nil
}

func isWire(err error) bool {
	var we *WireError
	return errors.As(err, &we)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// checkBrand runs the brand check the Fence's mode asks for before a write
// (forWrite) or a Latest.
func (f *Fence) checkBrand(ctx context.Context, forWrite bool) error {
	switch f.Brand {
	case 0:
		return nil
	case BrandVerifyAlways:
		if forWrite {
			return nil // checked by the write itself (Fence.write)
		}
		return f.verifyBrandRetried(ctx)
	case BrandVerify:
		return f.brandOnce.do(ctx, f.verifyBrandRetried, isWire)
	case BrandClaim:
		if forWrite {
			return f.brandOnce.do(ctx, func(ctx context.Context) error {
				_, err := f.ClaimBrand(ctx)
				return err
			}, isWire)
		}
		return f.brandOnce.refusal()
	}
	return invalidArg("brand", "unknown BrandMode %d", int(f.Brand))
}

// verifyBrandRetried is VerifyBrand with a read's retries: a transient
// failure to read the brand is tried again after a back-off, as every
// read a call makes before it writes.
func (f *Fence) verifyBrandRetried(ctx context.Context) error {
	_, err := retried(ctx, f, func() (struct{}, error) { return struct{}{}, f.VerifyBrand(ctx) })
	return err
}

// brandEveryWrite reports whether every write checks the brand itself: in
// its own atomic step on a store that can (brandedWrites), else by a read
// right before it (brandBeforeWrite).
func (f *Fence) brandEveryWrite() bool { return f.Brand == BrandVerifyAlways }
