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
// field, means the default. Each adapter reads the fields that name it and
// ignores the rest. Options are copied when the store is made.
type StoreOptions struct {
	// MaxObjectSize is the read limit of Get and GetPrefix in bytes, the
	// record header included (on the directory store also the largest
	// data a write accepts); zero (or less) means 64 MiB + 4 KiB, the
	// largest default payload and a record header. A larger object is
	// ErrTooLarge.
	MaxObjectSize int64

	// BlobPartSize (S3, GCS) is the size in bytes of the parts a blob
	// larger than one request is uploaded in, and so what a blob write
	// holds in memory: one part. Zero means 16 MiB. S3 takes at most
	// 10,000 parts, so it also bounds the largest blob there (about
	// 156 GiB at 16 MiB); on S3 it must be 5 MiB to 5 GiB.
	BlobPartSize int64

	// ReadOnly (directory) opens an existing store for reading only: it
	// creates nothing, takes no lock and needs no write permission; every
	// write returns an error matching fs.ErrPermission, and a directory
	// that holds no store one matching fs.ErrNotExist.
	ReadOnly bool

	// Script (Valkey) writes in one round trip: the value is SET under a
	// staging key and a Lua script, run with EVALSHA (EVAL once when the
	// server's script cache lacks it), checks and moves it onto the key.
	// False means WATCH/MULTI/EXEC, two round trips. Reads are the same
	// either way. It needs EVAL and EVALSHA (ACL +@scripting) and the
	// staging keys (see NewValkeyConditionalStore).
	Script bool

	// WaitReplicas (Valkey), when above zero, is the number of replicas
	// that must acknowledge a write before PutIfVersion reports it
	// landed, and confirm what Get and GetPrefix read before they return
	// it; fewer, or a failing WAIT, is an error matching
	// ErrOutcomeUnknown. The ACL user then also needs WAIT, and SET on
	// the replication sync key.
	WaitReplicas int

	// WaitTimeout (Valkey) bounds each WAIT; zero means one second. It is
	// cut to ctx's deadline and rounded up to whole milliseconds.
	WaitTimeout time.Duration
}

// ConditionalStore is the one storage primitive the fence needs: a read that
// returns bytes and their version together, and a write decided atomically by
// the server against an expected version.
//
// Implementations must be safe for concurrent use. The package's adapters
// (NewMinioConditionalStore, NewGCSConditionalStore,
// NewValkeyConditionalStore, NewDirConditionalStore) and MemStore implement it;
// writefencetest.TestConditionalStore checks any implementation against this
// contract.
//
// # Optional capabilities
//
// A store may offer faster ways to do what Get and PutIfVersion do:
// PrefixReader (the first bytes of an object without the rest),
// PartsPutter (a write of parts without joining them) and BrandedPutter (a
// write checked against the brand key in the same atomic step). A Fence,
// Probe and the conformance kit use them only through the helpers GetPrefix,
// PutParts and PutIfBranded, and the helpers use a store's capability only
// when the store declares it as its own (Capable): otherwise they fall back
// to Get and PutIfVersion. So the method that is probed and raced is the
// method that runs, and a wrapper is never bypassed: a type that embeds a
// store and overrides Get or PutIfVersion (a freeze, a quota, an audit log)
// inherits the embedded store's Capabilities method, which names the
// embedded store and not the wrapper, and is therefore used through its own
// Get and PutIfVersion only. The package's adapters declare their
// capabilities. Deleter and Lister are not faster paths of the core
// methods and need no declaration.
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
	// create it, and an expectVersion of a form the store never issues,
	// which cannot equal the current version. Such a malformed token is a
	// conflict on every store, not an invalid argument, and is refused
	// before anything is sent: the write is "iff the version still
	// matches", and a token the store never issued matches no version, so
	// the answer is the one a stale token gets. A caller cannot tell a
	// token the store never issued from one it issued to other bytes
	// without knowing every store's format, which tokens being opaque
	// forbids; and a Fence, which only ever passes tokens a store returned,
	// rereads after a conflict, so a garbage token costs it one fresh read,
	// never a wrong decision. Any other failure is returned
	// wrapped and never matches ErrConflict or ErrNotFound; after such a
	// failure the write may or may not have happened, except that a refusal
	// of the caller's credentials (matching fs.ErrPermission) wrote nothing.
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
	// derived from the damaged bytes themselves, and whose Head holds the
	// first bytes of the damaged data when the store can locate them.
	// PutIfVersion conditioned on any other version over damaged bytes
	// refuses with such a *CorruptError and writes nothing, so a version
	// remembered from before the damage never overwrites it unseen.
	// PutIfVersion conditioned on that damaged version replaces the damaged
	// bytes if and only if they are still exactly those bytes, decided as
	// atomically as any other precondition: that is how an operator
	// replaces them (Fence.Settle). The same damage twice may give the same
	// version; Fence.Settle does not rely on damaged versions being unique.
	//
	// A store whose writes check a bounded part of the object they
	// replace, so that a write costs the same whatever the object's size
	// (Valkey checks a value's first 3900 bytes, its last 100 and its
	// length), may miss damage outside that part that keeps the object's
	// size. Get must still report it, and so must GetPrefix of the whole
	// object; a GetPrefix of fewer bytes may return the version from
	// before the damage, with the bytes as they are, and a PutIfVersion
	// conditioned on that version may replace the damaged object whole.
	// Such a store documents the part it checks, which holds at least the
	// data's first 1343 bytes (the largest record header, so that every
	// decision a Fence makes is on checked bytes): a write it lets through
	// was decided on intact bytes, and damaged bytes reach a reader of the
	// whole object only as a *CorruptError.
	PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (newVersion string, err error)
}

// Capable is implemented by a store that declares its optional
// capabilities (PrefixReader, PartsPutter, BrandedPutter) as its own, so
// that GetPrefix, PutParts and PutIfBranded use them:
//
//	func (s *MyStore) Capabilities() writefence.ConditionalStore { return s }
//
// A store that is not Capable, or whose Capabilities returns another value
// than the store itself, is used through Get and PutIfVersion alone. A
// type that embeds a Capable store inherits this method, and the inherited
// method returns the embedded store; a wrapper therefore keeps its own Get
// and PutIfVersion in every path unless it declares capabilities itself, and
// then it must give each capability it has the behaviour of its own Get and
// PutIfVersion.
type Capable interface {
	// Capabilities returns the store whose capabilities are declared: the
	// receiver itself.
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
// start of an object without its rest. A Fence uses it, through GetPrefix,
// to learn a record's header without downloading its payload.
type PrefixReader interface {
	// GetPrefix returns the first n bytes stored at key (all of them when
	// the object is shorter), the object's total size, and the version
	// token of the whole object, all from one server response: the
	// version, size and leading bytes a Get at that moment would return.
	// Errors are as for Get, damage in place included, except the damage a
	// store that checks a bounded part of its objects may miss (see
	// ConditionalStore.PutIfVersion); n is at least 1.
	GetPrefix(ctx context.Context, key string, n int64) (prefix []byte, size int64, version string, err error)
}

// GetPrefix returns the first n bytes of the object at key, its size and
// its version, through s's PrefixReader when s declares it (see Capable),
// else through Get. The Fence, the probe and the conformance kit read a
// record's head through it.
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
// of data given as parts, stored as their concatenation without being
// joined in memory first. A Fence writes a record as its header and the
// caller's payload, so a store that streams the parts (an HTTP body, a
// file) never copies the payload.
type PartsPutter interface {
	// PutPartsIfVersion is PutIfVersion of the concatenation of parts,
	// with the same contract: the same preconditions, errors and version
	// tokens as PutIfVersion of the joined bytes. It must not read the
	// parts after it returns.
	PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (newVersion string, err error)
}

// PutParts writes the concatenation of parts at key if and only if its
// version is expectVersion, through s's PartsPutter when s declares it
// (see Capable), else through PutIfVersion of the joined parts. Every write
// a Fence makes goes through it (or through PutIfBranded), and so does
// every write of the probe and of the conformance kit's races.
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

// BrandedPutter is an optional capability of a ConditionalStore: a
// conditional write that also depends on the store's brand key (see
// Fence.ClaimBrand), checked in the same atomic step as the write. A Fence
// whose Brand is BrandVerifyAlways writes through it, via PutIfBranded,
// which leaves no gap between the brand check and the write.
type BrandedPutter interface {
	// PutIfBranded is PutPartsIfVersion of parts at key, with the same
	// contract, that lands only if brandKey holds exactly identity when it
	// lands. An absent brand key is refused with a *WireError whose
	// Absent is set, another value with a *WireError naming it; both match
	// ErrWire, and nothing is written. The version precondition is checked
	// too: when both fail, either refusal may be returned. key is never
	// brandKey. A store that cannot read brandKey in the atomic step of a
	// write of key (a Valkey cluster, for keys in different hash slots)
	// refuses with an error matching errors.ErrUnsupported, writing
	// nothing: it never checks the brand apart from the write.
	PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expectVersion string) (newVersion string, err error)
}

// PutIfBranded writes parts at key as PutParts does, if and only if
// brandKey holds exactly identity: in the write's own atomic step through
// s's BrandedPutter when s declares it (see Capable); otherwise by reading
// brandKey with Get first, which leaves a gap in which a re-brand goes
// unseen by this one write. A brand that is absent or holds another value
// is refused with a *WireError, writing nothing.
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
// assertion: an unconditional delete, for scratch keys (the probe, tests)
// and operators' tools. The fence never deletes a record.
type Deleter interface {
	// Delete removes key, whatever its version, damage in place included.
	// Deleting a key that does not exist is not an error. Any failure is
	// returned wrapped and never matches ErrNotFound or ErrConflict; a
	// later Get of a deleted key matches ErrNotFound, and a version
	// token returned before the delete never names other contents after
	// it, when the key is written again.
	Delete(ctx context.Context, key string) error
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

// The store sentinels. Test for them with errors.Is.
var (
	// ErrNotFound reports that a key was never written (or was deleted).
	ErrNotFound = errors.New("writefence: not found")

	// ErrConflict reports that a conditional write was refused because the
	// store's version of the key no longer matched the expected one.
	ErrConflict = errors.New("writefence: version conflict")

	// ErrTooLarge reports that a stored object exceeds the read limit of
	// the store that read it; nothing beyond the limit was buffered.
	ErrTooLarge = errors.New("writefence: object too large")

	// ErrCorrupt reports that a stored record failed a decoding check, or
	// that a store found its bytes damaged in place. The fence fails
	// closed on it and never overwrites the record unseen.
	ErrCorrupt = errors.New("writefence: corrupt record")
)

// StoreError records a store operation that failed and the key it was
// on, as fs.PathError does for a path: every adapter returns its failures
// as a *StoreError, a refused precondition, a malformed token, an invalid
// argument and damage in place (a *CorruptError) included. Three errors
// are returned as they are, because they are not failures of the store: a
// done context's own error (context.Canceled, context.DeadlineExceeded),
// the error of the caller's function that stopped a List, and the
// *WireError of a brand's refusal of PutIfBranded, which the helper
// PutIfBranded returns as it is when it falls back to Get. Err is the cause: a sentinel (ErrNotFound, ErrConflict,
// ErrTooLarge, ErrOutcomeUnknown, fs.ErrPermission,
// errors.ErrUnsupported...) when the adapter classified the failure, the
// client's own error (a minio.ErrorResponse, a *googleapi.Error, a redis
// error...) when it came from the client, or both; errors.Is and errors.As
// reach each of them.
type StoreError struct {
	Op  string // the store and the operation, e.g. "s3 put" or "valkey get"
	Key string // the key operated on; empty for an operation on no key
	Err error  // the cause
}

func (e *StoreError) Error() string {
	s := "writefence: " + e.Op
	if e.Key != "" {
		s += " " + esc(e.Key)
	}
	return s + ": " + strings.TrimPrefix(e.Err.Error(), "writefence: ")
}

// Unwrap returns Err.
func (e *StoreError) Unwrap() error { return e.Err }

// CorruptError names the key, the version that was found corrupt and the
// decoding check that failed. It matches ErrCorrupt. Version is what an
// operator passes to an explicit overwrite of exactly that record.
type CorruptError struct {
	Key     string // the record's key; empty when decoding bytes alone
	Version string // the store's version token of the corrupt record
	Check   string // the check that failed, e.g. "header checksum"

	// Head, from a store that found damage in place by its own check, is
	// the start of the damaged data when the store could still locate it,
	// nil otherwise: as much of it as the store read, up to its read
	// limit, and at least its first 4096 bytes when a read of the whole
	// object found the damage. A Fence decodes a record's header from it,
	// and the references after the header, so the epoch and the blobs of
	// a record damaged further on stay known.
	Head []byte
}

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
