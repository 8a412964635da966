package writefence

import (
	"context"
	"errors"
	"log/slog"
)

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
