package writefence

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrTermEnded reports that a TermSource hands out no more epochs (see
// TermSource). It is final for that TermSource: a writer elected again makes
// a new one, and seals first.
var ErrTermEnded = errors.New("writefence: term ended")

// TermSource is an EpochSource over a control plane that hands out one token
// per leadership term (a Kubernetes Lease's leaderTransitions, Consul's
// LockIndex): Epoch returns term<<32 | n, n rising from 1, continuing
// above a shard's record of this term by Writer after a restart (promise
// 17); a record absent or below what the Fence saw gives an
// *EpochRegressedError, ending nothing (promise 30).
//
// Term must return the term the caller holds now, 0 to 2^32-1, or an error
// when it holds none; hand one term to one leader, which draws its epochs
// from one source at a time (where a restart can leave a live zombie, start
// every process in a new term); and raise terms across leaders. The source
// ends for good (ErrTermEnded) once Term reports another term or an error,
// a shard's record shows a newer term or another writer of this one, or
// the term's epochs run out: a new term needs a new TermSource, which seals
// first. A call whose own ctx ended ends nothing. A TermSource is safe for
// concurrent use; set its fields before the first call, and do not copy it.
type TermSource struct {
	// Fence reads the shards' records. Required.
	Fence *Fence

	// Writer is the writer the epochs are pushed as. Required.
	Writer string

	// Term returns the term the caller holds now. Required.
	Term func(ctx context.Context) (uint64, error)

	mu    sync.Mutex      // guards the fields below; held across Term and the reads
	held  bool            // term is set
	term  uint64          // the term this source hands out epochs of
	seq   uint64          // the low half of the last epoch handed out
	read  map[string]bool // the shard keys whose record was read in this term
	ended error           // why the source hands out nothing more, once it does not
}

var _ EpochSource = (*TermSource)(nil)

// Epoch implements EpochSource (see TermSource). An ended source returns an
// error matching ErrTermEnded and, when Term's error ended it, that error;
// a failed read of the record or an ended ctx returns its error, and a
// record too damaged to show its epoch its *CorruptError.
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
	case err != nil && ctx.Err() != nil:
		// The call's own ctx ended: whatever the term function made of
		// it (a status of its own, say), it ends nothing.
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
	e := s.Fence.engine()
	seen := e.sightOf(key, floorState{})
	snap, err := retried(ctx, e, func() (*snapshot, error) { return e.readKey(ctx, key, true) })
	if err != nil {
		if isContextErr(err) && ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("writefence: term source: read %s: %w", esc(key), err)
	}
	st := decodeSnapshot(key, snap)
	if st.corrupt == nil || st.h.Epoch != 0 {
		e.sawRecord(key, st)
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
	}
	if err := checkWriter("writer", s.Writer); err != nil {
		return "", err
	}
	return s.Fence.engine().key(plugin, shard)
}

// Limits of the lease's epochs: Epoch returns term<<leaseSeqBits | n.
const (
	leaseSeqBits = 32
	// maxLeaseTerm is the highest term a lease can reach.
	maxLeaseTerm = 1<<(64-leaseSeqBits) - 1
	maxLeaseSeq  = 1<<leaseSeqBits - 1
)
