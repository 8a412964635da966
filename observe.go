package writefence

import (
	"context"
	"errors"
	"log/slog"
)

// PushEvent is what a Fence's Observer sees of a write of a record: a push,
// or a seal or a settle, which go through the same write loop. What
// happened is told by Err, tested like the error the call returns:
//
//   - nil: the record is this write (written now, or found already
//     written);
//   - errors.Is(Err, ErrConflict) with Retrying set: the write lost a race
//     and the call reads afresh and tries again; this may happen any number
//     of times before the one event that ends the call;
//   - ErrStaleEpoch, ErrWire, ErrCorrupt, ErrConflict (every attempt lost):
//     refused, nothing written;
//   - ErrOutcomeUnknown: the write's outcome could not be learned;
//   - anything else: a failure (network, auth, an untrusted store, ctx).
type PushEvent struct {
	Op       string // "push", "seal" or "settle"
	Key      string // the record's key
	Writer   string // the writing writer
	Epoch    uint64 // the epoch the write carried
	Attempt  int    // the attempt (read, then conditional write) it happened on, from 1; 0 when refused before the first (brand, probe)
	Retrying bool   // a lost race the call retries; false on the event that ends the call
	Err      error  // nil when the write landed; what happened otherwise
}

// SlogObserver returns an Observer for Fence.Observer that logs every event
// to l: landed writes and retried conflicts at debug level, refusals at
// warn level, failures and unknown outcomes at error level. Stored bytes in
// the attributes are escaped.
func SlogObserver(l *slog.Logger) func(context.Context, PushEvent) {
	return func(ctx context.Context, e PushEvent) {
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
// the order is the command's exit statuses' (cmd/writefence/exit.go).
func classify(e PushEvent) (string, slog.Level) {
	switch err := e.Err; {
	case err == nil:
		return "landed", slog.LevelDebug
	case e.Retrying:
		return "conflict-retried", slog.LevelDebug
	case errors.Is(err, ErrOutcomeUnknown):
		return "unknown", slog.LevelError
	case errors.Is(err, ErrWire):
		return "wire", slog.LevelWarn
	case errors.Is(err, ErrCorrupt):
		return "corrupt", slog.LevelWarn
	case errors.Is(err, ErrStaleEpoch):
		return "stale", slog.LevelWarn
	case errors.Is(err, ErrConflict):
		return "conflict", slog.LevelWarn
	}
	return "failed", slog.LevelError
}

func (f *Fence) observe(ctx context.Context, w *recordWrite, retrying bool, attempt int, err error) {
	if f.Observer != nil {
		f.Observer(ctx, PushEvent{Op: w.op, Key: w.key, Writer: w.writer, Epoch: w.epoch, Attempt: attempt, Retrying: retrying, Err: err})
	}
}
