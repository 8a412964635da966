package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/writefence/writefence/internal/keys"
)

// The operations that write a record. Each goes through Fence.write, the
// one write loop, so every guard a write needs is checked in one place.
const (
	opPush   = "push"
	opSeal   = "seal"
	opSettle = "settle"
)

// recordWrite is one validated write of a record: a push, a seal or a
// settle. decide turns what the store records into the record to write.
type recordWrite struct {
	op      string // opPush, opSeal or opSettle
	key     string
	writer  string
	epoch   uint64
	header  []byte // the record's encoded header; a seal sets it in decide
	payload []byte // the payload after it: the caller's bytes, never copied
	crc     uint32 // the payload's CRC-32C, as the header carries it
	record  []byte // header and payload joined, for a store without PartsPutter; built once

	// corruptVersion is, for a settle, the version found corrupt: the
	// only version it may replace.
	corruptVersion string
}

// recorded is what one read of a record's key found.
type recorded struct {
	found   bool
	whole   bool          // the whole record was read, not only its header
	version string        // the version of the bytes read (of the damage, when corrupt)
	h       header        // the decoded header; h.epoch is 0 when it did not decode
	payload []byte        // the payload, on a whole read of a sound record
	corrupt *CorruptError // set when the record, or the store's own check, failed
}

// write is the one write loop of a record, shared by Push, Seal and Settle:
// the brand check and the probe verdict, then read the recorded state,
// decide, one conditional write, and on a conflict back off and read again;
// an ambiguous outcome is settled by the next read. The Observer sees how it
// ended.
func (f *Fence) write(ctx context.Context, w *recordWrite) error {
	attempt := 0
	err := f.checkBrand(ctx, true)
	if err == nil && f.Probe {
		err = f.checkProbe(ctx)
	}
	if err == nil {
		attempt, err = f.attempts(ctx, w)
	}
	f.observe(ctx, w, false, attempt, err)
	return err
}

// attempts runs the read-decide-write attempts of w and returns the attempt
// it ended on.
func (f *Fence) attempts(ctx context.Context, w *recordWrite) (int, error) {
	maxAttempts := f.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = defaultMaxAttempts
	}
	// Only a push may skip its read: a seal carries the recorded payload
	// forward and a settle must see the damage it replaces.
	var version string
	skipRead := false
	if w.op == opPush {
		version, skipRead = f.cached(w.key, w.epoch)
	}
	var unsure error // set once a write's outcome was hidden by an error
	fail := func(err error) error {
		if unsure != nil {
			// An earlier write of ours may have landed and been superseded
			// since; what happened after cannot say, so the error is
			// reported but not matched as a refusal of ours.
			return &OutcomeUnknownError{Op: w.op, Key: w.key, Epoch: w.epoch, Err: fmt.Errorf("%w; then: %v", unsure, err)}
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		if !skipRead {
			st, err := f.read(ctx, w.key, w.op != opPush || f.VerifyPayloadOnPush)
			if err == nil && !st.whole && w.mayBeReplay(st.h) {
				// Only the payload itself can tell this very push from
				// another of the same epoch and writer.
				st, err = f.read(ctx, w.key, true)
			}
			if err != nil {
				return attempt, fail(err)
			}
			done, err := f.decide(w, st)
			if err != nil {
				return attempt, fail(err)
			}
			if done {
				f.remember(w.key, st.version, w.epoch)
				return attempt, nil
			}
			version = st.version // "" when absent: create-only
		}
		skipRead = false

		newVersion, err := f.put(ctx, w, version)
		if err == nil {
			f.remember(w.key, newVersion, w.epoch)
			return attempt, nil
		}
		f.forget(w.key)
		conflict := errors.Is(err, ErrConflict)
		switch {
		case conflict:
		case refusedWrite(err):
			// The store refused and wrote nothing (damage in place, the
			// brand inside its transaction): final, like a read's refusal.
			return attempt, fail(err)
		default:
			// The write may have landed; the next read settles it.
			unsure = err
			if ctx.Err() != nil {
				return attempt, &OutcomeUnknownError{Op: w.op, Key: w.key, Epoch: w.epoch, Err: err}
			}
		}
		if attempt >= maxAttempts {
			if unsure != nil {
				return attempt, &OutcomeUnknownError{Op: w.op, Key: w.key, Epoch: w.epoch, Err: err}
			}
			return attempt, fmt.Errorf("writefence: %s at epoch %d to %s: %d attempts: %w", w.op, w.epoch, esc(w.key), attempt, err)
		}
		if conflict {
			f.observe(ctx, w, true, attempt, err)
			if err := f.backoff(ctx, attempt); err != nil {
				return attempt, fail(err)
			}
		}
	}
}

// refusedWrite reports whether a write's error is a refusal after which
// nothing was written, so that retrying cannot help: a record the store
// found damaged, another wire identity, an argument the store rejects.
func refusedWrite(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrWire) || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrTooLarge)
}

// decide applies the write's rules to what the store records: done when the
// record already is this write (an earlier attempt landed), else nil to
// write w.record conditioned on st's version, or the refusal.
func (f *Fence) decide(w *recordWrite, st recorded) (done bool, err error) {
	if w.op == opSettle {
		return f.decideSettle(w, st)
	}
	if st.corrupt != nil {
		return false, st.corrupt
	}
	if st.found {
		if err := f.checkIdentity(w.key, st.h); err != nil {
			return false, err
		}
	}
	if w.op == opSeal {
		return f.decideSeal(w, st)
	}
	if st.found && w.mayBeReplay(st.h) && st.whole && bytes.Equal(st.payload, w.payload) {
		return true, nil
	}
	if st.found && w.epoch <= st.h.epoch {
		return false, staleEpoch(w, st.h)
	}
	return false, nil
}

// mayBeReplay reports whether a record with header h may be this very
// write, landed by an earlier attempt: same epoch, writer and payload size,
// and (where the header carries it) the same payload checksum. Only the
// payload bytes themselves decide.
func (w *recordWrite) mayBeReplay(h header) bool {
	return h.epoch == w.epoch && h.writer == w.writer && h.payloadLen == uint64(len(w.payload)) &&
		(h.version == 1 || h.payloadCRC == w.crc)
}

// put makes the write's one conditional write: header and payload as two
// parts on a store that takes parts, so the payload is never copied; joined
// once otherwise.
func (f *Fence) put(ctx context.Context, w *recordWrite, version string) (string, error) {
	if bp, ok := f.brandedPutter(); ok {
		return bp.PutIfBranded(ctx, keys.Brand(f.Prefix), f.identity(), w.key, w.joined(), version)
	}
	if pp, ok := f.Store.(PartsPutter); ok {
		return pp.PutPartsIfVersion(ctx, w.key, [][]byte{w.header, w.payload}, version)
	}
	return f.Store.PutIfVersion(ctx, w.key, w.joined(), version)
}

// joined returns the record as one slice, for a store that takes no parts;
// it is built once per write.
func (w *recordWrite) joined() []byte {
	if w.record == nil {
		w.record = make([]byte, 0, len(w.header)+len(w.payload))
		w.record = append(append(w.record, w.header...), w.payload...)
	}
	return w.record
}

func staleEpoch(w *recordWrite, h header) error {
	return &StaleEpochError{Key: w.key, Epoch: w.epoch, RecordedEpoch: h.epoch, RecordedWriter: h.writer}
}

// backoff sleeps before attempt+1, or returns ctx's error if ctx ends first.
func (f *Fence) backoff(ctx context.Context, attempt int) error {
	base := f.RetryDelay
	if base <= 0 {
		base = defaultRetryDelay
	}
	ceiling := maxRetryDelay
	if shift := attempt - 1; shift < 16 && base<<shift < ceiling {
		ceiling = base << shift
	}
	t := time.NewTimer(rand.N(ceiling) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
