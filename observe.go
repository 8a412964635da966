package writefence

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// WriteEvent is what a Fence's Observer sees of a write. Op names it:
// "push", "update", "commit" and "seal" (Push and PushFrom, Update, Commit,
// Seal), "settle" and "settle log" (Settle, and its entry in the settle
// log), "floor" (the KeepFloor floor of a Seal or Settle), "blob" (PutBlob),
// "collect" (Collect's horizon), "lease acquire", "lease renew",
// "lease release" and "lease settle" (a Lease's record), "brand claim"
// (ClaimBrand, and BrandClaim's claim).
//
// The engine reports each write once, when it ends, and before that each
// race it lost and retried (Retrying set, Err matching ErrConflict), as
// promise 27 says. Err says what happened, tested like the error the call
// returns: nil when the key holds this write (written now, or found written);
// for a refusal, nothing written, ErrStaleEpoch, ErrEpochRegressed, ErrWire,
// ErrCorrupt, ErrUntrustedStore, ErrLeaseHeld, ErrLeaseLost, ErrNotFound or
// ErrConflict (every attempt lost); ErrOutcomeUnknown, never with a conflict
// or a refusal, when the outcome could not be learned; anything else for a
// failure. Outcome names it.
type WriteEvent struct {
	Op       string    // what was written; see above
	Key      string    // the key written
	Writer   string    // the writer, or the lease's holder; empty for the brand
	Epoch    uint64    // the epoch the write carried; 0 for a lease, the brand or a collection's horizon
	Attempt  int       // the attempt (read, decision, conditional write) it happened on, from 1; 0 when refused before the first (brand, probe)
	Retrying bool      // a lost race the call retries; false on the event that ends the write
	Err      error     // nil when the write landed; what happened otherwise
	Start    time.Time // when the write began, before its first check: the same on every event of one write
}

// Outcome names what the event says happened, in one word for a metric
// label or a log field: "landed", "conflict-retried", "untrusted"
// (ErrUntrustedStore), "unknown" (ErrOutcomeUnknown), "wire", "corrupt",
// "regressed" (ErrEpochRegressed), "stale", "lease" (ErrLeaseHeld or
// ErrLeaseLost), "conflict" (every attempt lost) or "failed" (anything
// else). An error that matches several is named by the first in that order.
func (e WriteEvent) Outcome() string {
	outcome, _ := classify(e)
	return outcome
}

// SlogObserver returns an Observer that logs every event to l, stored bytes
// escaped: "landed" and "conflict-retried" at debug level, "wire",
// "corrupt", "stale", "lease" and "conflict" at warn, the rest at error.
func SlogObserver(l *slog.Logger) func(context.Context, WriteEvent) {
	return func(ctx context.Context, e WriteEvent) {
		outcome, level := classify(e)
		attrs := []slog.Attr{
			slog.String("op", e.Op),
			slog.String("outcome", outcome),
			slog.String("key", esc(e.Key)),
			slog.String("writer", esc(e.Writer)),
			slog.Uint64("epoch", e.Epoch),
			slog.Int("attempt", e.Attempt),
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("err", e.Err.Error()))
		}
		l.LogAttrs(ctx, level, "writefence write", attrs...)
	}
}

// classify names an event's outcome and the level it is logged at. An
// error may match several sentinels (an unknown outcome wraps its cause);
// the order is the command's exit statuses' (cmd/writefence/exit.go), with
// a record that went back named before a stale epoch or a lost lease,
// which it may also be.
func classify(e WriteEvent) (string, slog.Level) {
	switch err := e.Err; {
	case err == nil:
		return "landed", slog.LevelDebug
	case e.Retrying:
		return "conflict-retried", slog.LevelDebug
	case errors.Is(err, ErrUntrustedStore):
		return "untrusted", slog.LevelError
	case errors.Is(err, ErrOutcomeUnknown):
		return "unknown", slog.LevelError
	case errors.Is(err, ErrWire):
		return "wire", slog.LevelWarn
	case errors.Is(err, ErrCorrupt):
		return "corrupt", slog.LevelWarn
	case errors.Is(err, ErrEpochRegressed):
		return "regressed", slog.LevelError
	case errors.Is(err, ErrStaleEpoch):
		return "stale", slog.LevelWarn
	case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrLeaseLost):
		return "lease", slog.LevelWarn
	case errors.Is(err, ErrConflict):
		return "conflict", slog.LevelWarn
	}
	return "failed", slog.LevelError
}
