package writefence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/escape"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrStaleEpoch reports a write whose epoch was not above the record's.
	ErrStaleEpoch = errors.New("writefence: stale epoch")

	// ErrWire reports a brand or a record of another wire identity. Final.
	ErrWire = errors.New("writefence: wire identity mismatch")

	// ErrInvalidArgument reports an argument rejected, mostly before any
	// I/O, some against what the store holds. Nothing was written.
	ErrInvalidArgument = errors.New("writefence: invalid argument")

	// ErrOutcomeUnknown reports a write sent whose landing could not be
	// learned (promise 5).
	ErrOutcomeUnknown = errors.New("writefence: outcome unknown")

	// ErrEpochRegressed reports a record absent or lower (a lease record: at
	// a lower term) than seen before or kept as the shard's floor (promises
	// 29 to 31). Final; an operator settles it.
	ErrEpochRegressed = errors.New("writefence: epoch regressed")
)

// EpochRegressedError is the detail of a call refused because the record
// it would write or act on is absent or below what was seen of it. It
// matches ErrEpochRegressed. Its message has the stable form
//
//	writefence: epoch regressed: <op> at epoch <n> to <key> refused: saw epoch <e> by <writer>, found epoch <f> by <writer>
//
// with "<op> of <key>" for a call that writes no epoch, "found no record"
// for an absent record, "found a record whose epoch cannot be read" for
// one that does not decode, "the shard's floor holds" for "saw" when
// Floor is set, and "term" for "epoch" when Op is a lease's.
type EpochRegressedError struct {
	Op    string // the refused call: "push", "update", "commit", "seal", "settle", "collect", "check", "term source", "lease acquire" or "lease settle"
	Key   string // the record's key
	Epoch uint64 // the epoch the refused write carried (a lease settle: the term); 0 for Collect, a TermSource and a lease acquisition

	// Seen and SeenWriter are the highest epoch (a lease: term) and its
	// writer seen of the record (Check: or asked about), or the floor's (Floor).
	Seen       uint64
	SeenWriter string
	Floor      bool

	// Found and FoundWriter are what the record holds; Absent when none.
	Found       uint64
	FoundWriter string
	Absent      bool
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *EpochRegressedError) Error() string {
	unit := "epoch"
	if strings.HasPrefix(e.Op, "lease") {
		unit = "term"
	}
	at := " of"
	if e.Epoch != 0 {
		at = fmt.Sprintf(" at %s %d to", unit, e.Epoch)
	}
	seen := "saw"
	if e.Floor {
		seen = "the shard's floor holds"
	}
	found := "found no record"
	switch {
	case !e.Absent && e.Found == 0:
		found = "found a record whose " + unit + " cannot be read"
	case !e.Absent:
		found = fmt.Sprintf("found %s %d by %s", unit, e.Found, esc(e.FoundWriter))
	}
	return fmt.Sprintf("writefence: epoch regressed: %s%s %s refused: %s %s %d by %s, %s",
		orDefault(e.Op, opPush), at, esc(e.Key), seen, unit, e.Seen, esc(e.SeenWriter), found)
}

// Unwrap returns ErrEpochRegressed.
func (e *EpochRegressedError) Unwrap() error { return ErrEpochRegressed }

// InvalidArgumentError is the detail of ErrInvalidArgument.
type InvalidArgumentError struct {
	Arg    string // the argument's name, e.g. "plugin" or "epoch"
	Reason string // why it was rejected, lower case
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *InvalidArgumentError) Error() string {
	return "writefence: invalid argument: " + e.Arg + ": " + e.Reason
}

// Unwrap returns ErrInvalidArgument.
func (e *InvalidArgumentError) Unwrap() error { return ErrInvalidArgument }

func invalidArg(arg, format string, a ...any) error {
	return &InvalidArgumentError{Arg: arg, Reason: fmt.Sprintf(format, a...)}
}

// StaleEpochError is the detail of ErrStaleEpoch.
type StaleEpochError struct {
	Op             string // the refused call: "push", "update", "commit", "seal", "settle" or "check"; empty prints as "push"
	Key            string // the record's key
	Epoch          uint64 // the epoch the refused write carried
	RecordedEpoch  uint64 // the epoch the store records
	RecordedWriter string // the writer of the recorded record
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("writefence: stale epoch: %s at epoch %d to %s refused: recorded epoch %d by %s",
		orDefault(e.Op, opPush), e.Epoch, esc(e.Key), e.RecordedEpoch, esc(e.RecordedWriter))
}

// Unwrap returns ErrStaleEpoch.
func (e *StaleEpochError) Unwrap() error { return ErrStaleEpoch }

// WireError is the detail of a wire-identity refusal; it matches ErrWire.
// Its message is one of
//
//	writefence: wire: expected <identity> but <key> is absent
//	writefence: wire: expected <identity> found <value>
//
// with the found value escaped, so that it cannot forge a log line.
type WireError struct {
	Key      string // the brand key or the record's key
	Expected string // the configured identity
	Found    string // the identity found, raw; Error escapes it
	Absent   bool   // the key did not exist
}

// Error returns the message: "writefence: ", then what the fields say.
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

// OutcomeUnknownError reports a write that may or may not have landed. It
// matches ErrOutcomeUnknown and, through Err, the cause.
type OutcomeUnknownError struct {
	Op    string // the write, as WriteEvent.Op names it
	Key   string // the key written
	Epoch uint64 // the epoch written; 0 for a lease, the brand or a collection's horizon
	Err   error  // the error that hid the outcome
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *OutcomeUnknownError) Error() string {
	at := ""
	if e.Epoch != 0 {
		at = fmt.Sprintf(" at epoch %d", e.Epoch)
	}
	return fmt.Sprintf("writefence: outcome unknown: %s%s to %s: %v", e.Op, at, esc(e.Key), e.Err)
}

// Unwrap returns ErrOutcomeUnknown and the cause.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// Lease errors; test for them with errors.Is.
var (
	// ErrLeaseHeld reports a lease another holder or Lease value holds.
	ErrLeaseHeld = errors.New("writefence: lease held by another holder")

	// ErrLeaseLost reports a Lease that does not hold its lease (never
	// acquired, released or lost); only Acquire gets it back, at a new term.
	ErrLeaseLost = errors.New("writefence: lease lost")

	// ErrLeaseExpired reports that the holder's clock passed its expiry, no
	// takeover known; Epoch refuses until a Renew lands.
	ErrLeaseExpired = errors.New("writefence: lease expired")

	// ErrTakeoverTimeout reports that Lease.Hold's acquisition did not land
	// within TTL - TTL/4; nothing is held.
	ErrTakeoverTimeout = errors.New("writefence: takeover timed out")
)

// LeaseHeldError is the detail of ErrLeaseHeld.
type LeaseHeldError struct {
	Name   string    // the lease's name (Lease.Name)
	Key    string    // the lease record's key
	Holder string    // the holder the record names, raw; Error escapes it
	Term   uint64    // the record's term
	Expiry time.Time // when the record expires, by the holder's clock
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("writefence: lease %s held by %s at term %d until %s",
		esc(e.Name), esc(e.Holder), e.Term, e.Expiry.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrLeaseHeld.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// LeaseLostError is the detail of a lease lost to another term, or to no
// record; every later Epoch, Renew and Release returns it. It matches
// ErrLeaseLost, and ErrEpochRegressed when the record is gone or at a
// lower term, which no takeover writes (see Lease.Settle).
type LeaseLostError struct {
	Name    string // the lease's name (Lease.Name)
	Term    uint64 // the term the Lease held
	Holder  string // the holder the record names now, raw; Error escapes it. Empty when the record is gone
	NewTerm uint64 // the record's term now; 0 when the record is gone
}

// Error returns the message: "writefence: ", then what the fields say.
func (e *LeaseLostError) Error() string {
	switch {
	case e.NewTerm == 0:
		return fmt.Sprintf("writefence: lease %s: term %d: the record is gone: %v", esc(e.Name), e.Term, ErrLeaseLost)
	case e.NewTerm < e.Term:
		return fmt.Sprintf("writefence: lease %s: term %d: the record went back to term %d by %s: %v",
			esc(e.Name), e.Term, e.NewTerm, esc(e.Holder), ErrLeaseLost)
	}
	return fmt.Sprintf("writefence: lease %s: term %d: taken over by %s at term %d: %v",
		esc(e.Name), e.Term, esc(e.Holder), e.NewTerm, ErrLeaseLost)
}

// Unwrap returns ErrLeaseLost.
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// outcomeSettled: a lease found taken over, or gone, is lost whatever this
// Lease's last write did.
func (e *LeaseLostError) outcomeSettled() {}

// Is reports whether target is ErrEpochRegressed and the record is gone
// or went back below the term held.
func (e *LeaseLostError) Is(target error) bool {
	return target == ErrEpochRegressed && e.NewTerm < e.Term
}

// prefixed is err under a message that says where it happened: prefix,
// then err's own message without its leading "writefence: ", so that an
// error of the package wrapping another reads as one sentence rather than
// "writefence: x: writefence: y".
type prefixed struct {
	prefix string
	err    error
}

func (e *prefixed) Error() string {
	return e.prefix + strings.TrimPrefix(e.err.Error(), "writefence: ")
}

// Unwrap returns the error it wraps.
func (e *prefixed) Unwrap() error { return e.err }

// The operations of the engine, as the Observer and errors name them.
const (
	opPush         = "push"
	opUpdate       = "update"
	opCommit       = "commit"
	opBlob         = "blob"
	opSeal         = "seal"
	opSettle       = "settle"
	opSettleLog    = "settle log"
	opLeaseAcquire = "lease acquire"
	opLeaseRenew   = "lease renew"
	opLeaseRelease = "lease release"
	opBrandClaim   = "brand claim"
	opCollect      = "collect"
	opLeaseSettle  = "lease settle"
	opFloor        = "floor"
	opCheck        = "check"
	opTermSource   = "term source"
)

// ops lists every op an Observer can see, in the order WriteEvent's
// documentation names them.
var ops = []string{opPush, opUpdate, opCommit, opSeal, opSettle, opSettleLog, opFloor, opBlob, opCollect,
	opLeaseAcquire, opLeaseRenew, opLeaseRelease, opLeaseSettle, opBrandClaim}

// esc renders stored bytes for an error message or a log line (see
// internal/escape): a hostile value can neither forge a line nor flood one.
func esc(s string) string { return escape.String(s) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func isWire(err error) bool {
	var we *WireError
	return errors.As(err, &we)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// trim returns err's message without its leading "writefence: ", for an
// error quoted inside another.
func trim(err error) string { return strings.TrimPrefix(err.Error(), "writefence: ") }

// outcomeSettled is implemented by a refusal that settles what a write
// whose reply was lost could have done: whatever it did, the caller's
// state is known (a lease taken over is lost, whether or not this
// Lease's last renewal landed first). The engine returns such a refusal
// as it is, not as an unknown outcome.
type outcomeSettled interface{ outcomeSettled() }
