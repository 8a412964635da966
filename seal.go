package writefence

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
)

// Seal raises the recorded epoch of (plugin, shard) to epoch without
// changing its payload, so that every push at a lower epoch is refused from
// now on: a new writer's first act, which fences a deposed writer at once
// rather than at the new writer's first push.
//
// Seal reads the record and writes it back with the same payload, epoch and
// writer in its header, in one PutIfVersion conditioned on the version it
// read, so the payload it carries forward is exactly the one recorded at
// that moment; a push landing in between makes the write conflict, and Seal
// reads again. A shard never pushed is sealed with an empty payload:
// leaving it absent would let a deposed writer create it. Latest then
// returns that empty payload, not ErrNotFound.
//
// The rules are Push's: the arguments are validated alike, a corrupt record
// (ErrCorrupt) or one of another identity (ErrWire) refuses without
// writing, and an epoch not greater than the recorded one returns a
// *StaleEpochError (ErrStaleEpoch) — unless the record already is this seal
// (same epoch and writer), when Seal returns nil, so retrying a seal whose
// reply was lost succeeds. Conflicts are retried as Push retries them.
func (f *Fence) Seal(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	p, err := f.prepare(plugin, shard, writer, epoch, nil)
	if err != nil {
		return err
	}
	maxAttempts := f.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	var unsure error // set once a write's outcome was hidden by an error
	fail := func(err error) error {
		if unsure != nil {
			return &OutcomeUnknownError{Key: p.key, Epoch: epoch, Err: fmt.Errorf("%w; then: %v", unsure, err)}
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		version, record, done, err := f.sealRecord(ctx, p)
		if err != nil {
			return fail(err)
		}
		if done {
			return nil
		}
		newVersion, err := f.Store.PutIfVersion(ctx, p.key, record, version)
		if err == nil {
			f.remember(p.key, newVersion, epoch)
			return nil
		}
		f.forget(p.key)
		if !errors.Is(err, ErrConflict) {
			unsure = err
			if ctx.Err() != nil {
				return &OutcomeUnknownError{Key: p.key, Epoch: epoch, Err: err}
			}
		}
		if attempt >= maxAttempts {
			if unsure != nil {
				return &OutcomeUnknownError{Key: p.key, Epoch: epoch, Err: err}
			}
			return fmt.Errorf("writefence: seal at epoch %d of %s: %d attempts: %w", epoch, Escape(p.key), attempt, err)
		}
		if errors.Is(err, ErrConflict) {
			if err := f.backoff(ctx, attempt); err != nil {
				return fail(err)
			}
		}
	}
}

// sealRecord reads the record of p.key and returns the sealed record to
// write and the version to condition it on, or done when the record is
// already this seal, or the refusal.
func (f *Fence) sealRecord(ctx context.Context, p pushArgs) (version string, record []byte, done bool, err error) {
	data, version, err := f.Store.Get(ctx, p.key)
	var payload []byte
	switch {
	case errors.Is(err, ErrNotFound):
		version = ""
	case err != nil:
		return "", nil, false, fmt.Errorf("writefence: read %s: %w", Escape(p.key), err)
	default:
		h, pl, err := f.decode(p.key, version, data)
		if err != nil {
			return "", nil, false, err
		}
		if h.epoch == p.epoch && h.writer == p.writer {
			f.remember(p.key, version, h.epoch)
			return "", nil, true, nil
		}
		if p.epoch <= h.epoch {
			return "", nil, false, &StaleEpochError{Key: p.key, Epoch: p.epoch, RecordedEpoch: h.epoch, RecordedWriter: h.writer}
		}
		payload = pl
	}
	return version, encodeRecord(f.identity(), p.writer, p.epoch, sha256.Sum256(payload), payload), false, nil
}
