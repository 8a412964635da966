package writefence

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
)

// Outcome classifies what happened to a push, for an Observer.
type Outcome int

// The outcomes a push can have. Every push that passed argument validation
// ends in exactly one of Landed, Stale, Wire, Corrupt, Unknown, Conflict or
// Failed; ConflictRetried may precede it any number of times.
const (
	Landed          Outcome = iota + 1 // the record is this push (written now, or found already written)
	Stale                              // refused: the recorded epoch is equal or higher
	ConflictRetried                    // a write lost a race; the push reads afresh and tries again
	Conflict                           // every attempt lost a race; Push returned ErrConflict
	Wire                               // refused: another wire identity (record or brand)
	Corrupt                            // refused: the recorded record failed to decode
	Unknown                            // the write's outcome could not be learned
	Failed                             // any other error (network, auth, an untrusted store, ctx)
)

var outcomeNames = [...]string{"", "landed", "stale", "conflict-retried", "conflict", "wire", "corrupt", "unknown", "failed"}

// String returns the outcome's lower-case name, e.g. "landed".
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// PushEvent is what an Observer sees of a write of a record: a push, or a
// seal or a settle, which go through the same write loop.
type PushEvent struct {
	Op      string  // "push", "seal" or "settle"
	Key     string  // the record's key
	Writer  string  // the pushing writer
	Epoch   uint64  // the epoch the push carried
	Outcome Outcome // what happened
	Attempt int     // the attempt (read, then conditional write) it happened on, from 1; 0 when refused before the first (brand, probe)
	Err     error   // nil for Landed; the detail otherwise (use errors.As)
}

// Observer sees every outcome of every write a Fence makes (Push, Seal,
// Settle), for metrics or logs. ObservePush is called synchronously on the pushing goroutine, from
// many goroutines at once: it must be safe for concurrent use and quick.
type Observer interface {
	ObservePush(ctx context.Context, e PushEvent)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(ctx context.Context, e PushEvent)

// ObservePush implements Observer.
func (fn ObserverFunc) ObservePush(ctx context.Context, e PushEvent) { fn(ctx, e) }

// SlogObserver returns an Observer that logs every outcome to l: landed and
// retried conflicts at debug level, refusals at warn level, failures and
// unknown outcomes at error level. Stored bytes in the attributes are
// escaped.
func SlogObserver(l *slog.Logger) Observer {
	return ObserverFunc(func(ctx context.Context, e PushEvent) {
		level := slog.LevelError
		switch e.Outcome {
		case Landed, ConflictRetried:
			level = slog.LevelDebug
		case Stale, Conflict, Wire, Corrupt:
			level = slog.LevelWarn
		}
		attrs := []slog.Attr{
			slog.String("outcome", e.Outcome.String()),
			slog.String("key", Escape(e.Key)),
			slog.String("writer", Escape(e.Writer)),
			slog.Uint64("epoch", e.Epoch),
			slog.Int("attempt", e.Attempt),
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("err", e.Err.Error()))
		}
		l.LogAttrs(ctx, level, "writefence push", attrs...)
	})
}

// outcomeOf classifies the error a push ended with.
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Landed
	case errors.Is(err, ErrOutcomeUnknown):
		return Unknown
	case errors.Is(err, ErrStaleEpoch):
		return Stale
	case errors.Is(err, ErrWire):
		return Wire
	case errors.Is(err, ErrCorrupt):
		return Corrupt
	case errors.Is(err, ErrConflict):
		return Conflict
	}
	return Failed
}

func (f *Fence) observe(ctx context.Context, w *recordWrite, o Outcome, attempt int, err error) {
	if f.Observer != nil {
		f.Observer.ObservePush(ctx, PushEvent{Op: w.op, Key: w.key, Writer: w.writer, Epoch: w.epoch, Outcome: o, Attempt: attempt, Err: err})
	}
}
