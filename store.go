package writefence

import (
	"context"

	"github.com/writefence/writefence/internal/defaults"
)

// ConditionalStore is the one storage primitive the fence needs: a read that
// returns bytes and their version together, and a write decided atomically by
// the server against an expected version.
//
// Implementations must be safe for concurrent use. The package's adapters
// (MinioConditionalStore, GCSConditionalStore, ValkeyConditionalStore) and
// MemStore implement it; writefencetest.TestConditionalStore checks any
// implementation against this contract.
type ConditionalStore interface {
	// Get returns the bytes stored at key and the store's version token for
	// exactly those bytes, both taken from one server response.
	//
	// A key that does not exist returns an error for which
	// errors.Is(err, ErrNotFound). An object larger than the store's read
	// limit returns an error for which errors.Is(err, ErrTooLarge), having
	// read no more than the limit. Any other failure is returned wrapped and
	// never matches ErrNotFound or ErrConflict.
	//
	// Version tokens are opaque and non-empty. For one key a token never
	// names two different contents: if a later Get returns a token equal to
	// one returned earlier, the bytes are the bytes returned then.
	Get(ctx context.Context, key string) (data []byte, version string, err error)

	// PutIfVersion stores data at key if and only if the store's current
	// version of key equals expectVersion, decided atomically by the server.
	// An empty expectVersion means the key must not exist (create-only).
	// It returns the version token of the bytes written.
	//
	// A failed precondition returns an error for which
	// errors.Is(err, ErrConflict) and writes nothing; that includes a
	// non-empty expectVersion for a key that does not exist, which must not
	// create it. Any other failure is returned wrapped and never matches
	// ErrConflict or ErrNotFound; after such a failure the write may or may
	// not have happened.
	//
	// A client-side read, compare and write is not an implementation: the
	// gap between the compare and the write is the race this package closes.
	//
	// Damage in place: a store whose version token is kept beside the bytes
	// and so does not change when the bytes are damaged in place (a file
	// edited or truncated on disk, a Valkey value edited by hand) checks the
	// bytes it holds. Get (and GetPrefix) of damaged bytes returns a
	// *CorruptError (ErrCorrupt) whose Version names exactly the damaged
	// bytes as found: a token distinct from every token of intact content,
	// derived from the damaged bytes themselves. PutIfVersion conditioned on
	// any other version over damaged bytes refuses with such a *CorruptError
	// and writes nothing, so a version remembered from before the damage
	// never overwrites it unseen. PutIfVersion conditioned on that damaged
	// version replaces the damaged bytes if and only if they are still
	// exactly those bytes, decided as atomically as any other precondition:
	// that is how an operator settles it (Fence.Settle).
	PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (newVersion string, err error)
}

// Deleter is an optional capability of a ConditionalStore, found by type
// assertion: an unconditional delete, used only on scratch keys (the probe,
// tests). Deleting a key that does not exist is not an error. The fence never
// deletes a record.
type Deleter interface {
	Delete(ctx context.Context, key string) error
}

// defaultMaxObjectSize is the read limit of the package's stores when none
// is configured (64 MiB + 4 KiB): the largest payload a Fence accepts by
// default plus room for a record header.
const defaultMaxObjectSize = defaults.MaxObjectSize

// PrefixReader is an optional capability of a ConditionalStore, found by
// type assertion: reading the start of an object without its rest. A Fence
// uses it to learn a record's header without downloading its payload.
type PrefixReader interface {
	// GetPrefix returns the first n bytes stored at key (all of them when
	// the object is shorter), the object's total size, and the version
	// token of the whole object, all from one server response. Errors are
	// as for Get; n is at least 1.
	GetPrefix(ctx context.Context, key string, n int64) (prefix []byte, size int64, version string, err error)
}

// PartsPutter is an optional capability of a ConditionalStore, found by
// type assertion: PutIfVersion of data given as parts, stored as their
// concatenation without being joined in memory first. A Fence writes a
// record as its header and the caller's payload, so a store that streams
// the parts (an HTTP body, a file) never copies the payload.
type PartsPutter interface {
	// PutPartsIfVersion is PutIfVersion of the concatenation of parts,
	// with the same contract: the same preconditions, errors and version
	// token as PutIfVersion of the joined bytes. It must not read the
	// parts after it returns.
	//
	// A wrapper that embeds a store with this method and overrides
	// PutIfVersion must override PutPartsIfVersion too: a Fence calls it
	// instead of PutIfVersion.
	PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (newVersion string, err error)
}

// Lister is an optional capability of a ConditionalStore, found by type
// assertion: listing the keys that start with a prefix, for operators and
// tools (the command's ls). The fence never lists.
type Lister interface {
	// List calls fn once with each key that starts with prefix. A key
	// written or deleted while the listing runs may or may not be listed.
	// When fn returns an error List stops and returns it; cancelling ctx
	// stops it with ctx's error.
	List(ctx context.Context, prefix string, fn func(key string) error) error
}

// BrandedPutter is an optional capability of a ConditionalStore, found by
// type assertion: a conditional write that also depends on the store's
// brand key (see Fence.ClaimBrand), checked in the same atomic step as the
// write. A Fence whose Brand is BrandVerifyAlways writes through it, which
// leaves no gap between the brand check and the write.
type BrandedPutter interface {
	// PutIfBranded is PutIfVersion of data at key, with the same contract,
	// that lands only if brandKey holds exactly identity when it lands.
	// An absent brand key is refused with a *WireError whose Absent is
	// set, another value with a *WireError naming it; both match ErrWire,
	// and nothing is written. The version precondition is checked too:
	// when both fail, either refusal may be returned. key is never
	// brandKey.
	PutIfBranded(ctx context.Context, brandKey, identity, key string, data []byte, expectVersion string) (newVersion string, err error)
}

// readLimit returns a store's read limit: maxObjectSize, its configured
// limit, or defaultMaxObjectSize when that is zero or less.
func readLimit(maxObjectSize int64) int64 {
	if maxObjectSize > 0 {
		return maxObjectSize
	}
	return defaultMaxObjectSize
}
