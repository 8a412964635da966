package writefence

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Test for them with errors.Is: the errors the library
// returns wrap them and carry detail in the typed errors below.
var (
	// ErrNotFound reports that a key was never written (or was deleted).
	ErrNotFound = errors.New("writefence: not found")

	// ErrConflict reports that a conditional write was refused because the
	// store's version of the key no longer matched the expected one.
	ErrConflict = errors.New("writefence: version conflict")

	// ErrStaleEpoch reports that a push was refused, before any write,
	// because its epoch was not strictly greater than the recorded one.
	ErrStaleEpoch = errors.New("writefence: stale epoch")

	// ErrWire reports that a store or a record holds another wire identity
	// than the one configured. It is final: retrying cannot change it.
	ErrWire = errors.New("writefence: wire identity mismatch")

	// ErrCorrupt reports that a stored record failed a decoding check. The
	// fence fails closed on it and never overwrites the record.
	ErrCorrupt = errors.New("writefence: corrupt record")

	// ErrInvalidArgument reports an argument rejected before any I/O.
	ErrInvalidArgument = errors.New("writefence: invalid argument")

	// ErrTooLarge reports that a stored object exceeds the read limit of
	// the store that read it; nothing beyond the limit was buffered.
	ErrTooLarge = errors.New("writefence: object too large")

	// ErrOutcomeUnknown reports that a write was sent but its result could
	// not be learned: it may or may not have landed. Calling Push again
	// with the same arguments settles it.
	ErrOutcomeUnknown = errors.New("writefence: outcome unknown")
)

// InvalidArgumentError names the argument that was rejected and why.
// It matches ErrInvalidArgument.
type InvalidArgumentError struct {
	Arg    string // the argument's name, e.g. "plugin" or "epoch"
	Reason string // why it was rejected, lower case
}

func (e *InvalidArgumentError) Error() string {
	return "writefence: invalid argument: " + e.Arg + ": " + e.Reason
}

// Unwrap returns ErrInvalidArgument.
func (e *InvalidArgumentError) Unwrap() error { return ErrInvalidArgument }

func invalidArg(arg, format string, a ...any) error {
	return &InvalidArgumentError{Arg: arg, Reason: fmt.Sprintf(format, a...)}
}

// StaleEpochError is the detail of a push refused by the strict-epoch rule.
// It matches ErrStaleEpoch.
type StaleEpochError struct {
	Key            string // the record's key
	Epoch          uint64 // the epoch the refused push carried
	RecordedEpoch  uint64 // the epoch the store records
	RecordedWriter string // the writer of the recorded record
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("writefence: stale epoch: push at epoch %d to %s refused: recorded epoch %d by %s",
		e.Epoch, esc(e.Key), e.RecordedEpoch, esc(e.RecordedWriter))
}

// Unwrap returns ErrStaleEpoch.
func (e *StaleEpochError) Unwrap() error { return ErrStaleEpoch }

// CorruptError names the key, the version that was found corrupt and the
// decoding check that failed. It matches ErrCorrupt. Version is what an
// operator passes to an explicit overwrite of exactly that record.
type CorruptError struct {
	Key     string // the record's key; empty when decoding bytes alone
	Version string // the store's version token of the corrupt record
	Check   string // the check that failed, e.g. "header checksum"
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

// WireError is the detail of a wire-identity refusal. It matches ErrWire.
// When Absent is true the key held nothing and Found is empty.
//
// Its message has one of two stable forms:
//
//	writefence: wire: expected <identity> but <key> is absent
//	writefence: wire: expected <identity> found <value>
//
// The found value comes last and is escaped, so it cannot
// forge a field after it or another log line; an empty value prints as "".
// The key of a found value travels in Key.
type WireError struct {
	Key      string // the brand key or the record's key
	Expected string // the configured identity
	Found    string // the identity found, raw; Error escapes it
	Absent   bool   // the key did not exist
}

func (e *WireError) Error() string {
	if e.Absent {
		return "writefence: wire: expected " + esc(e.Expected) + " but " + esc(e.Key) + " is absent"
	}
	found := esc(e.Found)
	if found == "" {
		found = `""` // quotes are escaped, so no value prints as this
	}
	return "writefence: wire: expected " + esc(e.Expected) + " found " + found
}

// Unwrap returns ErrWire.
func (e *WireError) Unwrap() error { return ErrWire }

// StoreError records a store operation that failed and the key it was
// on, as fs.PathError does for a path: every adapter returns its failures
// as a *StoreError. Err is the cause: a sentinel of this package
// (ErrNotFound, ErrConflict, ErrTooLarge, errors.ErrUnsupported...) when
// the adapter classified the failure, the client's own error (a
// minio.ErrorResponse, a *googleapi.Error, a redis error...) when it came
// from the client, or both; errors.Is and errors.As reach each of them.
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

// OutcomeUnknownError reports a write whose result could not be learned:
// it may or may not have landed. It matches ErrOutcomeUnknown and, through
// Err, the cause (for example context.DeadlineExceeded or a network error).
type OutcomeUnknownError struct {
	Op    string // "push", "seal", "settle" or "lease write"
	Key   string // the key written
	Epoch uint64 // the epoch written; 0 for a lease write
	Err   error  // the error that hid the outcome
}

func (e *OutcomeUnknownError) Error() string {
	at := ""
	if e.Epoch != 0 {
		at = fmt.Sprintf(" at epoch %d", e.Epoch)
	}
	return fmt.Sprintf("writefence: outcome unknown: %s%s to %s: %v", e.Op, at, esc(e.Key), e.Err)
}

// Unwrap returns ErrOutcomeUnknown and the cause.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// Lease errors. Test for them with errors.Is.
var (
	// ErrLeaseHeld reports that Acquire found the lease held, unexpired, by
	// another holder. The detail is a *LeaseHeldError.
	ErrLeaseHeld = errors.New("writefence: lease held by another holder")

	// ErrLeaseLost reports that a Lease does not hold its lease: it never
	// acquired it, released it, or the store shows another term (a takeover
	// after the lease expired) or no record at all. Only Acquire can get it
	// back, at a new term.
	ErrLeaseLost = errors.New("writefence: lease lost")

	// ErrLeaseExpired reports that the holder's own clock has passed the
	// expiry of its last acquire or renewal. Epoch refuses until a Renew
	// lands, which it does if nobody took the lease over meanwhile.
	ErrLeaseExpired = errors.New("writefence: lease expired")
)

// LeaseHeldError is the detail of an Acquire refused because another holder
// holds the lease. It matches ErrLeaseHeld.
type LeaseHeldError struct {
	Key    string    // the lease record's key
	Holder string    // the holder the record names, raw; Error escapes it
	Term   uint64    // the record's term
	Expiry time.Time // when the record expires, by the holder's clock
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("writefence: lease %s held by %s at term %d until %s",
		esc(e.Key), esc(e.Holder), e.Term, e.Expiry.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrLeaseHeld.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }
