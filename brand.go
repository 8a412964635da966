package writefence

import (
	"context"
	"errors"
	"fmt"
)

// Brand is the store-level wire identity: one reserved key per store, the
// brand key, that holds the identity of the format the store's records are
// written in. A program checks it before it writes, so an executor that
// does not speak a store's format never writes to it. Records carry the
// identity too (see Fence.Identity); the brand refuses a foreign program at
// start-up, before it touches any record, and covers stores that hold no
// record yet.
//
// The brand key holds exactly the identity's bytes: no header, no newline,
// no encoding, so any tool of any format can read and write a brand, and an
// operator can look at it with the store's own client. Any other content,
// including an empty value, bytes that are not UTF-8 or a value far longer
// than an identity, is "another value": a refusal that names what was found,
// escaped and cut short (see Escape), never "absent".
//
// Three ways to hold the brand key, one per kind of caller:
//
//   - Claim, at a writer's start-up: brands an empty store with the
//     identity, or accepts a store already branded with it. Of many
//     claimers racing an empty store exactly one write lands and all of
//     them learn the winner's value.
//   - Verify, at start-up or before every write: reads only, never writes;
//     an unbranded store is refused.
//   - Install, administrative (a deploy step, an operator tool): brands
//     an unbranded store with the configured identity and reports whether it
//     wrote. The caller cannot choose the value.
//
// A refusal is a *WireError, which matches ErrWire, and is final: nothing
// in the package retries it, because reading again will not change the
// answer. Any other failure (a network error, a permission error, a key of
// the wrong type on Valkey, an object over the store's read limit) is
// returned wrapped, is never reported as a refusal or as "absent", and may
// be retried by the caller; a cancelled or expired ctx is returned as is.
//
// A Fence checks a Brand before it writes when given one (Fence.Brand and
// Fence.BrandCheck). A ValkeyConditionalStore can check the brand inside
// every write's own transaction (ValkeyConditionalStore.BrandKey), the only
// way that leaves no gap between the check and the write.
//
// The zero value is not usable: Store is required. A Brand holds no state
// and is safe for concurrent use.
type Brand struct {
	// Store holds the brand key. Required, except in Fence.Brand, where nil
	// means the Fence's Store.
	Store ConditionalStore

	// Identity is the identity the brand key must hold; empty means
	// DefaultIdentity. It is at most MaxIdentityLen bytes.
	Identity string

	// Key is the brand key; empty means BrandKey(""), the reserved key
	// under DefaultPrefix. Key is used as given and not derived from any
	// Fence's Prefix: a program that keeps one brand per prefix sets
	// Key to BrandKey(prefix), here and wherever the brand is installed.
	Key string
}

func (b *Brand) identity() string { return orDefault(b.Identity, DefaultIdentity) }

func (b *Brand) key() string { return orDefault(b.Key, BrandKey("")) }

// check validates the configuration before any I/O.
func (b *Brand) check() error {
	switch {
	case b.Store == nil:
		return invalidArg("brand", "Brand.Store is nil")
	case len(b.Identity) > MaxIdentityLen:
		return invalidArg("identity", "%d bytes, more than %d", len(b.Identity), MaxIdentityLen)
	case len(b.Key) > MaxKeyLen:
		return invalidArg("key", "%d bytes, more than %d", len(b.Key), MaxKeyLen)
	}
	return nil
}

// Claim brands the store with the identity unless it already holds one. It
// reads the brand key first: an equal brand returns nil and another value a
// *WireError, both without writing. An absent brand is written with one
// create-only PutIfVersion and then read back, and the read decides: nil
// when the brand holds the identity (this claim or another of the same
// identity won), a *WireError naming the winner's value when it holds
// another. So of N claimers racing an empty store exactly one write lands,
// every claimer of the winner's identity returns nil and every other is
// refused. Claim never retries; a failure that is not a refusal may be
// retried by calling Claim again.
func (b *Brand) Claim(ctx context.Context) error {
	if err := b.check(); err != nil {
		return err
	}
	err := b.read(ctx)
	if !errors.Is(err, errBrandAbsent) {
		return err
	}
	key := b.key()
	_, putErr := b.Store.PutIfVersion(ctx, key, []byte(b.identity()), "")
	if isContextErr(putErr) {
		return putErr
	}
	// The confirming read also settles a write whose outcome is unknown
	// and a create-only write refused because a racer won.
	err = b.read(ctx)
	switch {
	case err == nil, isWire(err):
		return err
	case putErr != nil && !errors.Is(putErr, ErrConflict):
		return fmt.Errorf("writefence: brand: claim %s: %w", Escape(key), putErr)
	case errors.Is(err, errBrandAbsent):
		// Written (or won by a racer) and gone by the time of the read:
		// something deletes the brand key. Not a refusal: nothing was
		// found to refuse.
		return fmt.Errorf("writefence: brand: claim %s: the brand key is absent right after the claim", Escape(key))
	}
	return err
}

// Verify reads the brand key and returns nil if it holds the identity. It
// never writes. An absent brand key is refused with a *WireError whose
// Absent is set ("writefence: wire: expected <identity> but <key> is
// absent"), another value with a *WireError naming it ("writefence: wire:
// expected <identity> found <value>"). Other failures are returned wrapped
// and never read as absent.
func (b *Brand) Verify(ctx context.Context) error {
	if err := b.check(); err != nil {
		return err
	}
	err := b.read(ctx)
	if errors.Is(err, errBrandAbsent) {
		return &WireError{Key: b.key(), Expected: b.identity(), Absent: true}
	}
	return err
}

// Install brands an unbranded store with the identity: it returns true when
// it wrote the brand, false with a nil error when the brand already holds
// the identity (nothing is written), and a *WireError when it holds another
// value (nothing is written). It writes at most once, create-only, so it
// never overwrites a brand, even one written by a racer after the read.
// The value written is always the configured identity: to re-brand a store
// for another format, an operator removes the brand key with the store's
// own tools first.
func (b *Brand) Install(ctx context.Context) (installed bool, err error) {
	if err := b.check(); err != nil {
		return false, err
	}
	err = b.read(ctx)
	if !errors.Is(err, errBrandAbsent) {
		return false, err
	}
	key := b.key()
	_, err = b.Store.PutIfVersion(ctx, key, []byte(b.identity()), "")
	switch {
	case err == nil:
		return true, nil
	case isContextErr(err):
		return false, err
	case !errors.Is(err, ErrConflict):
		return false, fmt.Errorf("writefence: brand: install %s: %w", Escape(key), err)
	}
	// A racer branded the store between the read and the write.
	err = b.read(ctx)
	if errors.Is(err, errBrandAbsent) {
		return false, fmt.Errorf("writefence: brand: install %s: refused as existing, then absent", Escape(key))
	}
	return false, err
}

// errBrandAbsent is read's report of an absent brand key; it never leaves
// the package.
var errBrandAbsent = errors.New("writefence: brand absent")

// read reads the brand key once: nil when it holds the identity,
// errBrandAbsent when it does not exist, a *WireError when it holds another
// value, and any other failure wrapped (a cancelled ctx as is).
func (b *Brand) read(ctx context.Context) error {
	key := b.key()
	data, _, err := b.Store.Get(ctx, key)
	switch {
	case err == nil:
		return compareBrand(key, b.identity(), data, true)
	case errors.Is(err, ErrNotFound):
		return errBrandAbsent
	case isContextErr(err):
		return err
	}
	return fmt.Errorf("writefence: brand: read %s: %w", Escape(key), err)
}

// compareBrand is the one comparison of a brand key's content with an
// identity, shared by Brand and the Valkey adapter's in-transaction check.
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

// BrandMode says when a Fence checks its Brand. The record-level identity
// (Fence.Identity) is checked on every push whatever the mode.
//
// Which to use:
//
//   - BrandVerifyOnce, the default, when the store is branded by a separate
//     step (Brand.Install at deploy time): writers
//     never write the brand and refuse a store nobody branded. One read per
//     Fence.
//   - BrandClaimOnce when writers create their stores themselves: the first
//     writer to start brands an empty store, the others accept it. One read
//     per Fence, plus one create-only write and one read on an empty store.
//   - BrandVerifyAlways when a store can be re-branded while writers run (a
//     migration to another format) and old writers must stop at their next
//     push rather than at their next start. One read per Push and Latest.
//     On a general store the check and the write are still two steps, so a
//     re-brand between them lets that one push land; on Valkey set
//     ValkeyConditionalStore.BrandKey instead, which checks inside the
//     write's transaction.
type BrandMode int

// The brand modes.
const (
	// BrandVerifyOnce verifies the brand before the Fence's first Push or
	// Latest. The zero value.
	BrandVerifyOnce BrandMode = iota

	// BrandClaimOnce claims the brand before the Fence's first Push. Latest
	// never claims and does not verify either (a reader must not write, and
	// the store may not be claimed yet); it returns the claim's refusal
	// once a claim was refused.
	BrandClaimOnce

	// BrandVerifyAlways verifies the brand before every Push and every
	// Latest.
	BrandVerifyAlways
)

// checkBrand runs the brand check the Fence's mode asks for before a push
// (forPush) or a Latest. With no Brand it does nothing.
func (f *Fence) checkBrand(ctx context.Context, forPush bool) error {
	if f.Brand == nil {
		return nil
	}
	b := *f.Brand
	if b.Store == nil {
		b.Store = f.Store
	}
	if b.identity() != f.identity() {
		return invalidArg("brand", "brand identity %s differs from the fence's identity %s", Escape(b.identity()), Escape(f.identity()))
	}
	switch f.BrandCheck {
	case BrandVerifyAlways:
		return b.Verify(ctx)
	case BrandVerifyOnce:
		return f.brandOnce.do(ctx, b.Verify, isWire)
	case BrandClaimOnce:
		if forPush {
			return f.brandOnce.do(ctx, b.Claim, isWire)
		}
		return f.brandOnce.refusal()
	}
	return invalidArg("brand check", "unknown BrandMode %d", int(f.BrandCheck))
}
