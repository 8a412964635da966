package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/defaults"
)

// StoreOptions are the settings of the package's adapters; nil, or a zero
// field, means the default. An adapter reads the fields that name it, when
// the store is made.
type StoreOptions struct {
	// MaxObjectSize is the read limit of Get and GetPrefix in bytes (on
	// the directory store also the largest data a write accepts); zero or
	// less means 64 MiB + 4 KiB. A larger object is ErrTooLarge.
	MaxObjectSize int64

	// BlobPartSize (S3, GCS) is the size of the parts a blob larger than
	// one request is uploaded in, and so the memory a blob write holds;
	// zero means 16 MiB. On S3 it is 5 MiB to 5 GiB, and bounds a blob to
	// 10,000 parts (about 156 GiB at 16 MiB).
	BlobPartSize int64

	// ReadOnly (directory) opens an existing store, needing no write
	// permission: a write returns an error matching fs.ErrPermission, and
	// opening a directory that holds no store one matching fs.ErrNotExist.
	ReadOnly bool

	// Script (Valkey) writes in one round trip (a Lua script), not two.
	Script bool

	// WaitReplicas (Valkey), when above zero, is the number of replicas
	// that must acknowledge a write before PutIfVersion reports it landed,
	// and confirm what Get and GetPrefix read before they return it;
	// fewer, or a failing WAIT, is an error matching ErrOutcomeUnknown.
	// Set it when the server has replicas and failover (promise 4).
	WaitReplicas int

	// WaitTimeout (Valkey) bounds each WAIT (one second when zero, and
	// never past ctx's deadline).
	WaitTimeout time.Duration
}

// ConditionalStore is the one storage primitive the fence needs: a read that
// returns bytes and their version together, and a write decided atomically
// by the server against an expected version. Implementations must be safe
// for concurrent use; writefencetest.TestConditionalStore checks one. Faster
// paths (PrefixReader, PartsPutter, BrandedPutter) are used only when a
// store declares them (Capable).
type ConditionalStore interface {
	// Get returns the bytes stored at key and the store's version token for
	// exactly those bytes, from one server response: an error matching
	// ErrNotFound for a missing key, ErrTooLarge for an object over the
	// store's read limit (having read no more than the limit). Any other
	// failure is returned wrapped and never matches ErrNotFound or
	// ErrConflict. Tokens are opaque and non-empty, and for one key never
	// name two contents: a token equal to one returned earlier means the
	// bytes returned then.
	Get(ctx context.Context, key string) (data []byte, version string, err error)

	// PutIfVersion stores data at key if and only if the store's current
	// version of key equals expectVersion, decided atomically by the
	// server, and returns the new version; an empty expectVersion means the
	// key must not exist. A client-side read, compare and write is not an
	// implementation.
	//
	// A failed precondition returns an error matching ErrConflict and
	// writes nothing; so does a non-empty expectVersion for a missing key
	// (which is not created) and one of a form the store never issues
	// (refused before anything is sent). Any other failure is returned
	// wrapped and never matches ErrConflict or ErrNotFound; the write may
	// then have happened, except after a refusal of the credentials
	// (matching fs.ErrPermission).
	//
	// A store whose token is kept beside its bytes, so that damage in
	// place does not change it (a file edited on disk, a Valkey value
	// edited by hand), checks its bytes: Get and GetPrefix of damaged bytes
	// return a *CorruptError whose Version is derived from them, unlike any
	// token of intact content, and whose Head holds their start when the
	// store can locate it; PutIfVersion over them refuses with that error,
	// unless conditioned on exactly that Version: then it replaces them if
	// they are still those bytes (Fence.Settle). The same damage twice may
	// give the same Version. A store whose writes check
	// only a bounded part of the object (Valkey: the first 3900 bytes, the
	// last 100 and the length) may miss damage outside it that keeps the
	// size: Get, and GetPrefix of the whole object, still report it, a
	// shorter GetPrefix may return the version from before the damage, and
	// a PutIfVersion on that version may replace the object. Such a store
	// documents the part, which holds at least the data's first 1343 bytes, the largest record
	// header, so that a Fence decides on checked bytes.
	PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (newVersion string, err error)
}

// Capable is implemented by a store that declares its optional
// capabilities as its own, for the helpers (GetPrefix, PutParts,
// PutIfBranded, StatBlobs, DeleteBlobs, WriteBlob) to use:
//
//	func (s *MyStore) Capabilities() writefence.ConditionalStore { return s }
//
// A wrapper that embeds a Capable store inherits a Capabilities that names
// the embedded store, so the wrapper is used through its own Get and
// PutIfVersion alone, unless it declares capabilities that behave as they
// do.
type Capable interface {
	// Capabilities returns the receiver itself.
	Capabilities() ConditionalStore
}

// capability returns s's implementation of the optional capability C when
// s declares its capabilities as its own (see Capable). It is the one
// place where a capability is chosen.
func capability[C any](s ConditionalStore) (C, bool) {
	var zero C
	c, ok := s.(Capable)
	if !ok || !sameStore(c.Capabilities(), s) {
		return zero, false
	}
	impl, ok := s.(C)
	return impl, ok
}

// bytesNamed is a store of the package whose version names the object's
// bytes (S3's ETag, GCS's generation): no damage in place keeps a
// version, so a write conditioned on one replaces exactly the bytes it
// names, however long. Found with capability, as a declared capability.
type bytesNamed interface{ versionNamesBytes() }

// sameStore reports whether a and b are the same store value, without the
// panic of == on an uncomparable dynamic type.
func sameStore(a, b ConditionalStore) bool {
	if a == nil || b == nil {
		return false
	}
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// PrefixReader is an optional capability of a ConditionalStore: reading the
// start of an object without its rest, as a Fence reads a record's header.
type PrefixReader interface {
	// GetPrefix returns the first n (at least 1) bytes stored at key, the
	// object's size and its version, from one server response: what a Get
	// at that moment would return. Errors are as for Get, damage included
	// but for what a bounded check misses (see ConditionalStore).
	GetPrefix(ctx context.Context, key string, n int64) (prefix []byte, size int64, version string, err error)
}

// GetPrefix returns the first n bytes of the object at key, its size and
// its version, through s's PrefixReader when s declares it (see Capable),
// else through Get. Every read of a record's head goes through it.
func GetPrefix(ctx context.Context, s ConditionalStore, key string, n int64) (prefix []byte, size int64, version string, err error) {
	if n < 1 {
		return nil, 0, "", invalidArg("n", "%d, must be at least 1", n)
	}
	if pr, ok := capability[PrefixReader](s); ok {
		return pr.GetPrefix(ctx, key, n)
	}
	data, version, err := s.Get(ctx, key)
	if err != nil {
		return nil, 0, "", err
	}
	return data[:min(int64(len(data)), n)], int64(len(data)), version, nil
}

// PartsPutter is an optional capability of a ConditionalStore: PutIfVersion
// of data given as parts (a record's header and the caller's payload),
// stored as their concatenation without joining them in memory.
type PartsPutter interface {
	// PutPartsIfVersion is PutIfVersion of the concatenation of parts,
	// with the same contract; it must not read parts after it returns.
	PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (newVersion string, err error)
}

// PutParts writes the concatenation of parts at key if and only if its
// version is expectVersion, through s's PartsPutter when s declares it
// (see Capable), else through PutIfVersion of the joined parts. Every write
// of a Fence, the probe and the kit's races goes through it or
// PutIfBranded.
func PutParts(ctx context.Context, s ConditionalStore, key string, parts [][]byte, expectVersion string) (newVersion string, err error) {
	if pp, ok := capability[PartsPutter](s); ok {
		return pp.PutPartsIfVersion(ctx, key, parts, expectVersion)
	}
	return s.PutIfVersion(ctx, key, joinParts(parts), expectVersion)
}

// joinParts returns the concatenation of parts, without a copy when there
// is one part.
func joinParts(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	return bytes.Join(parts, nil)
}

// BrandedPutter is an optional capability of a ConditionalStore: a write
// checked against the store's brand key in its own atomic step.
type BrandedPutter interface {
	// PutIfBranded is PutPartsIfVersion of parts at key (never brandKey)
	// that lands only if brandKey holds exactly identity. An absent brand
	// is refused with a *WireError whose Absent is set, another value with
	// a *WireError naming it; either refusal may come when the version
	// fails too. A store that cannot read brandKey in the write's atomic
	// step (a Valkey cluster, across slots) returns an error matching
	// errors.ErrUnsupported. Every refusal writes nothing.
	PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expectVersion string) (newVersion string, err error)
}

// PutIfBranded is PutParts if and only if brandKey holds exactly identity,
// checked in the write's atomic step through s's BrandedPutter when s
// declares it (see Capable), else by a Get of brandKey first, which leaves a
// gap for a re-brand. An absent or other brand is a *WireError; nothing is
// written.
func PutIfBranded(ctx context.Context, s ConditionalStore, brandKey, identity, key string, parts [][]byte, expectVersion string) (newVersion string, err error) {
	if key == brandKey {
		return "", invalidArg("key", "%s is the brand key", esc(key))
	}
	if bp, ok := capability[BrandedPutter](s); ok {
		return bp.PutIfBranded(ctx, brandKey, identity, key, parts, expectVersion)
	}
	data, _, err := s.Get(ctx, brandKey)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", compareBrand(brandKey, identity, nil, false)
	case err != nil:
		return "", err
	}
	if err := compareBrand(brandKey, identity, data, true); err != nil {
		return "", err
	}
	return PutParts(ctx, s, key, parts, expectVersion)
}

// Deleter is an optional capability of a ConditionalStore, found by type
// assertion: an unconditional delete, for scratch keys and operators'
// tools. The fence never deletes a record.
type Deleter interface {
	// Delete removes key, whatever its version or damage; a missing key is
	// not an error, and no failure matches ErrNotFound or ErrConflict. A
	// token returned before the delete never names other contents after
	// the key is written again.
	Delete(ctx context.Context, key string) error
}

// Lister is an optional capability of a ConditionalStore, found by type
// assertion: listing keys by prefix, for tools (a Fence lists none).
type Lister interface {
	// List calls fn once with each key that starts with prefix (a key
	// written or deleted meanwhile may be missed); fn's error or ctx's
	// ends it and is returned.
	List(ctx context.Context, prefix string, fn func(key string) error) error
}

// The store sentinels; test for them with errors.Is.
var (
	// ErrNotFound reports a key never written, or deleted.
	ErrNotFound = errors.New("writefence: not found")

	// ErrConflict reports a conditional write whose expected version differed.
	ErrConflict = errors.New("writefence: version conflict")

	// ErrTooLarge reports an object over the store's read limit; nothing
	// beyond the limit was buffered.
	ErrTooLarge = errors.New("writefence: object too large")

	// ErrCorrupt reports a record that failed a decoding check, or bytes a
	// store found damaged in place (promise 7).
	ErrCorrupt = errors.New("writefence: corrupt record")
)

// StoreError records a failed store operation and its key, as fs.PathError
// does a path: every adapter returns its failures as a *StoreError, except
// a done ctx's error, a List fn's error and a brand's *WireError. Err
// reaches, by errors.Is and errors.As, the sentinel the adapter classified
// the failure as (ErrConflict, fs.ErrPermission...), the client's own error
// (a minio.ErrorResponse...), or both.
type StoreError struct {
	Op  string // the store and the operation, e.g. "s3 put" or "valkey get"
	Key string // the key operated on; empty for an operation on no key
	Err error  // the cause
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *StoreError) Error() string {
	s := "writefence: " + e.Op
	if e.Key != "" {
		s += " " + esc(e.Key)
	}
	return s + ": " + strings.TrimPrefix(e.Err.Error(), "writefence: ")
}

// Unwrap returns Err.
func (e *StoreError) Unwrap() error { return e.Err }

// CorruptError names the key, the version found corrupt (what Settle
// replaces) and the check that failed. It matches ErrCorrupt.
type CorruptError struct {
	Key     string // the record's key; empty when decoding bytes alone
	Version string // the store's version token of the corrupt record
	Check   string // the check that failed, e.g. "header checksum"

	// Head is the start of bytes a store found damaged in place, when it
	// could locate them (at least 4096 bytes when it read the whole
	// object): a Fence decodes the header and references from it.
	Head []byte
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *CorruptError) Error() string {
	s := "writefence: corrupt record: " + e.Check
	if e.Key != "" {
		s += ": key " + esc(e.Key)
	}
	if e.Version != "" {
		s += " version " + esc(e.Version)
	}
	return s
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// storeErr returns a *StoreError for op on key. kind, when not nil, is the
// package's sentinel for the failure; err, when not nil, is the client's
// error. At least one of them is set.
func storeErr(op, key string, kind, err error) error {
	var cause error
	switch {
	case kind == nil:
		cause = err
	case err == nil:
		cause = kind
	default:
		cause = fmt.Errorf("%w: %w", kind, err)
	}
	return &StoreError{Op: op, Key: key, Err: cause}
}

// tooLarge is a store's refusal of an object over its limit.
func tooLarge(op, key string, limit int64) error {
	return &StoreError{Op: op, Key: key, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)}
}

// defaultMaxObjectSize is the read limit of the package's stores when none
// is configured (64 MiB + 4 KiB): the largest payload a Fence accepts by
// default plus room for a record header.
const defaultMaxObjectSize = defaults.MaxObjectSize

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
