package writefence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/writefence/writefence/internal/record"
)

// EpochSource is where a push's epoch comes from: the seam through which a
// control plane's lease epoch (a fencing token) reaches the fence. The fence
// does not care how an epoch is decided; it guarantees only what happens
// once a push arrives claiming one.
type EpochSource interface {
	// Epoch returns the epoch the caller currently holds for (plugin,
	// shard). It must be at least 1; an error means the caller holds no
	// epoch and must not push.
	Epoch(ctx context.Context, plugin, shard string) (uint64, error)
}

// StaticEpochSource is an EpochSource that returns the same epoch for every
// shard, for a writer handed one fencing token by its control plane. Zero is
// not an epoch and returns an error matching ErrInvalidArgument.
type StaticEpochSource uint64

// Epoch implements EpochSource.
func (s StaticEpochSource) Epoch(context.Context, string, string) (uint64, error) {
	if s == 0 {
		return 0, invalidArg("epoch", "StaticEpochSource is 0; epochs start at 1")
	}
	return uint64(s), nil
}

// PushFrom asks src for the epoch of (plugin, shard) and pushes payload at
// it, as Push does. It returns the epoch it used, so a caller can log what
// it claimed; an error from src is returned wrapped, its detail reachable
// with errors.As (a *LeaseLostError names the new holder and term), and
// nothing is written. The wrapping adds "writefence: epoch source: " in
// front of src's message without repeating the prefix src's own error
// starts with.
func (f *Fence) PushFrom(ctx context.Context, src EpochSource, plugin, shard, writer string, payload []byte) (uint64, error) {
	if src == nil {
		return 0, invalidArg("source", "EpochSource is nil")
	}
	epoch, err := src.Epoch(ctx, plugin, shard)
	if err != nil {
		return 0, &prefixed{prefix: "writefence: epoch source: ", err: err}
	}
	return epoch, f.Push(ctx, plugin, shard, writer, epoch, payload)
}

// ErrTermEnded reports that a TermSource hands out no more epochs: its term
// function reported another term than the one it holds, or a term it
// cannot carry, or the store shows that the term is not this writer's
// alone, or the term's epochs ran out. It is final for that TermSource: a
// writer elected again makes a new one, and seals first. Test for it with
// errors.Is.
var ErrTermEnded = errors.New("writefence: term ended")

// TermSource is an EpochSource over a control plane that hands out one
// token per leadership term (a Kubernetes Lease's leaderTransitions,
// Consul's LockIndex): it turns the term into push epochs, term<<32 | n.
//
// A Fence admits one push per epoch, so a term cannot serve as the epoch
// itself. Epoch returns term<<32 | n with n rising on every call from 1, so
// every epoch it returns is greater than the last, and every epoch of a
// later term is greater than every epoch of an earlier one. The first time
// it is asked for a shard in its term it reads the shard's record (its
// header alone where the store reads prefixes) and continues above the
// epoch recorded there when that epoch is of the same term by the same
// Writer: a process restarted within its term carries on where it left off,
// rather than being refused. Later epochs of the shard cost no read. A
// record that read finds absent, or below the highest epoch its Fence
// wrote or read of it, hands out no epoch of the shard: Epoch returns an
// *EpochRegressedError (ErrEpochRegressed), ends nothing, and reads again
// on the next call, so that the restarted process does not carry on below
// what was lost; an operator settles the record (Settlement.Lost) or
// tells the Fence to forget it (Fence.Forget). A Fence that never saw the
// record cannot know: a process restarted with a new Fence continues
// above what the record holds, which KeepFloor bounds by the last seal.
//
// # What the term function must guarantee
//
// Term is called on every Epoch. It returns the term the caller holds now,
// or an error when the caller does not hold one (it lost or never won the
// election, or the control plane cannot be asked). The source relies on:
//
//   - one leader per term: no two writers, and no two live processes, are
//     ever handed the same term. A process restarted in its term must be
//     the only one left of its predecessor, which the term function cannot
//     tell apart from it: where a restart can leave a live zombie behind,
//     make every start a new term (a holder identity unique to each process
//     start);
//   - terms strictly rising across leaders: every term is greater than
//     every term handed to an earlier leader, so the new leader's epochs
//     pass the old leader's, and its seal fences them;
//   - terms of at most 2^32-1, so that term<<32 fits in 64 bits. A term
//     above it is refused (ErrTermEnded) and no epoch is handed out;
//     term 0 is a term like any other (its epochs are 1, 2, ...).
//
// The source checks what it can. It holds the first term it is given, and
// once the term function reports another one, newer or older, it hands out
// nothing more (ErrTermEnded): a new term is a new leadership, which starts
// with a seal, from a new TermSource. A term function error ends it too:
// the source can no longer tell that its term still holds, and a term it
// cannot confirm is a term it must not carry on. (A call whose own ctx
// ended returns ctx.Err() and ends nothing: that is the caller's choice,
// not the term function's report.) A shard whose record is of a newer term, or of this term by
// another writer, ends the source too: the term is not this writer's alone.
// A term's 2^32-1 epochs running out ends it as well.
//
// # Use
//
// Set the fields, then seal each shard the writer will write with an epoch
// from Epoch (Fence.Seal) and pass the TermSource to Fence.PushFrom. A
// TermSource is safe for concurrent use; its calls are serialized, so one
// waits for another's term function and read. Set the fields before the
// first call and do not copy a TermSource after it.
type TermSource struct {
	// Fence is where the shards' records are read on the first epoch of
	// each shard. Required.
	Fence *Fence

	// Writer is the writer the epochs are pushed as: a record of this
	// source's term by this writer is continued above. Required.
	Writer string

	// Term returns the term the caller holds now; see above. Required.
	Term func(ctx context.Context) (uint64, error)

	mu    sync.Mutex      // guards the fields below; held across Term and the reads
	held  bool            // term is set
	term  uint64          // the term this source hands out epochs of
	seq   uint64          // the low half of the last epoch handed out
	read  map[string]bool // the shard keys whose record was read in this term
	ended error           // why the source hands out nothing more, once it does not
}

var _ EpochSource = (*TermSource)(nil)

// Epoch implements EpochSource: it asks Term for the current term and
// returns term<<32 | n, greater than every epoch it returned before, and,
// on the shard's first epoch, greater than the shard's recorded epoch when
// that is of this term by Writer. A term function error ends the source:
// it returns an error matching both ErrTermEnded and that error, now and
// on every later call. A failed read of the shard's record or an ended ctx
// returns that error and no epoch; a record too damaged to show its epoch
// returns its *CorruptError. An ended source returns an error matching
// ErrTermEnded.
func (s *TermSource) Epoch(ctx context.Context, plugin, shard string) (uint64, error) {
	key, err := s.check(plugin, shard)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return 0, s.ended
	}
	term, err := s.Term(ctx)
	switch {
	case err != nil && isContextErr(err) && ctx.Err() != nil:
		return 0, ctx.Err()
	case err != nil:
		return 0, s.endErr(err, "the term function failed")
	case term > maxLeaseTerm:
		return 0, s.end("term %d is above 2^32-1, the highest a term source can carry", term)
	case !s.held:
		s.held, s.term, s.seq, s.read = true, term, 0, make(map[string]bool)
	case term != s.term:
		return 0, s.end("the term function reports term %d", term)
	}
	if !s.read[key] {
		if err := s.continueAbove(ctx, key); err != nil {
			return 0, err
		}
		s.read[key] = true
	}
	if s.seq >= maxLeaseSeq {
		return 0, s.end("its %d epochs are used up", uint64(maxLeaseSeq))
	}
	s.seq++
	return s.term<<leaseSeqBits | s.seq, nil
}

// continueAbove reads the record at key and raises the sequence to the
// recorded epoch's when it is of this term by this writer. The caller
// holds mu.
func (s *TermSource) continueAbove(ctx context.Context, key string) error {
	seen := s.Fence.sightOf(key, floorState{})
	snap, err := s.Fence.readKey(ctx, key, true)
	if err != nil {
		if isContextErr(err) && ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("writefence: term source: read %s: %w", esc(key), err)
	}
	st := decodeSnapshot(key, snap)
	if st.corrupt == nil || st.h.Epoch != 0 {
		s.Fence.sawRecord(key, st)
		if err := regression(opTermSource, key, 0, st, seen); err != nil {
			return err // the record went back: no epoch continues from it
		}
	}
	switch {
	case !st.found:
		return nil
	case st.h.Epoch == 0:
		return st.corrupt // not even the header decodes: no epoch to go above
	}
	// A header that decodes tells the epoch, whatever failed after it (the
	// payload's checksum, another identity): the push will meet the same
	// refusal, but the epoch is known.
	term, seq := st.h.Epoch>>leaseSeqBits, st.h.Epoch&maxLeaseSeq
	switch {
	case term > s.term:
		return s.end("%s records epoch %d of term %d by %s", esc(key), st.h.Epoch, term, esc(st.h.Writer))
	case term == s.term && st.h.Writer != s.Writer:
		return s.end("%s records epoch %d of this term by %s: two writers in one term", esc(key), st.h.Epoch, esc(st.h.Writer))
	case term == s.term && seq > s.seq:
		s.seq = seq
	}
	return nil
}

// end ends the source for the reason given and returns the error it will
// return from now on. The caller holds mu.
func (s *TermSource) end(format string, a ...any) error {
	s.ended = fmt.Errorf("%s: %w", s.endPrefix(format, a...), ErrTermEnded)
	return s.ended
}

// endErr ends the source on cause, which its error wraps as well as
// ErrTermEnded. The caller holds mu.
func (s *TermSource) endErr(cause error, format string, a ...any) error {
	s.ended = fmt.Errorf("%s: %w: %w", s.endPrefix(format, a...), cause, ErrTermEnded)
	return s.ended
}

func (s *TermSource) endPrefix(format string, a ...any) string {
	held := ""
	if s.held {
		held = fmt.Sprintf(" at term %d", s.term)
	}
	return fmt.Sprintf("writefence: term source of %s%s: %s", esc(s.Writer), held, fmt.Sprintf(format, a...))
}

// check validates the TermSource's fields and returns the shard's key.
func (s *TermSource) check(plugin, shard string) (string, error) {
	switch {
	case s.Fence == nil:
		return "", invalidArg("fence", "TermSource.Fence is nil")
	case s.Term == nil:
		return "", invalidArg("term", "TermSource.Term is nil")
	case s.Writer == "":
		return "", invalidArg("writer", "empty")
	case len(s.Writer) > record.MaxWriterLen:
		return "", invalidArg("writer", "%d bytes, more than %d", len(s.Writer), record.MaxWriterLen)
	}
	return s.Fence.key(plugin, shard)
}
