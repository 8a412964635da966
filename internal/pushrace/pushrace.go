// Package pushrace races Fence.Push calls at one epoch per round on a
// store, with the contention forced by a barrier inside the Fence's own
// write engine. The conformance kit (writefencetest) and the command's
// race run it; it is not part of the public API.
package pushrace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/hook"
)

// Race describes a race of Fence.Push calls for Run: the scratch
// shard and the size of the race.
type Race struct {
	// Writers is how many writers push in each round, each through a
	// writefence.Fence of its own, as separate processes would; at least 2.
	Writers int

	// Rounds is how many rounds run; at least 1. Round r pushes epoch r, so
	// the shard must not exist when the race starts.
	Rounds int

	// Prefix, Plugin and Shard name the scratch shard: Prefix is the
	// fences' writefence.Fence.Prefix.
	Prefix, Plugin, Shard string

	// Progress, when set, is called after each round with what it saw, from
	// the goroutine that called RacePush.
	Progress func(Round)
}

// Round is what one round of Run saw.
type Round struct {
	// Round counts from 1; Epoch is the epoch every writer pushed.
	Round int
	Epoch uint64

	// Winners names the writers whose push returned nil. Writers are named
	// writer-00, writer-01, and so on.
	Winners []string

	// Stale counts the pushes refused with writefence.ErrStaleEpoch.
	Stale int

	// Errors holds every other failure, of a push (the error names its
	// writer) or of the read that checks the record after the round: errors
	// the race cannot blame on the store, such as a lost connection. A
	// round with errors proves nothing either way.
	Errors []error

	// Violations says how the round broke the contract, one sentence each:
	// more than one winner, no winner with every writer refused as stale,
	// a record that disagrees with the winner or cannot be read. A store
	// with a real conditional write has none.
	Violations []string
}

// Run races Fence.Push calls at one epoch per round on store and reports
// each round. On a store whose conditional write is real exactly one push
// per round lands, every other is refused as stale, and the record the
// round leaves is the winner's.
//
// The contention is forced, not hoped for. Each writer has its own Fence
// over store, as separate processes would, and writes through exactly the
// store methods a Fence uses on store (see writefence.Capable): the
// barrier sits in the Fence's write engine, right before its conditional
// write, not in a wrapper of the store. Each writer's first write of a
// round waits there until every writer has reached its first write or
// returned: every writer has read the same record (or skipped the read on
// the version its Fence remembers from winning the round before) before
// any of them writes. The waiting writers are then released one by one in
// a random order, so that on a fast local store the same writer does not
// win every round. A store that ignores preconditions lets every writer
// land, in every round.
//
// Run returns the rounds it ran. Its error is ctx's when ctx ends before
// the last round (the rounds run so far are returned with it), or says why
// the race cannot be run; failures within a round are in the round.
func Run(ctx context.Context, store writefence.ConditionalStore, race Race) ([]Round, error) {
	switch {
	case store == nil:
		return nil, errors.New("writefence: race: nil store")
	case race.Writers < 2 || race.Rounds < 1:
		return nil, fmt.Errorf("writefence: race: %d writers and %d rounds; want at least 2 writers and 1 round", race.Writers, race.Rounds)
	}
	fences := make([]*writefence.Fence, race.Writers)
	for i := range fences {
		fences[i] = &writefence.Fence{Store: store, Prefix: race.Prefix}
	}
	checker := &writefence.Fence{Store: store, Prefix: race.Prefix}

	var rounds []Round
	for r := 1; r <= race.Rounds && ctx.Err() == nil; r++ {
		epoch := uint64(r)
		b := newBarrier(race.Writers)
		errs := make([]error, race.Writers)
		var wg sync.WaitGroup
		for i, f := range fences {
			gated := hook.With(ctx, &hook.Hooks{Write: func(ctx context.Context, _ string, write func() (string, error)) (string, error) {
				if err := b.arrive(ctx, i); err != nil {
					return "", err
				}
				return write()
			}})
			wg.Go(func() {
				errs[i] = f.Push(gated, race.Plugin, race.Shard, writerName(i), epoch, pushPayload(r, i))
				b.leave(i)
			})
		}
		b.release()
		wg.Wait()

		round := Round{Round: r, Epoch: epoch, Winners: []string{}}
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				round.Winners = append(round.Winners, writerName(i))
				winner = i
			case errors.Is(err, writefence.ErrStaleEpoch):
				round.Stale++
			default:
				round.Errors = append(round.Errors, fmt.Errorf("%s: %w", writerName(i), err))
			}
		}
		violation := func(format string, a ...any) {
			round.Violations = append(round.Violations, fmt.Sprintf(format, a...))
		}
		switch {
		case len(round.Winners) > 1:
			violation("%d writers landed epoch %d: %s", len(round.Winners), epoch, strings.Join(round.Winners, ", "))
		case len(round.Winners) == 0 && len(round.Errors) == 0:
			violation("no writer landed epoch %d, and every one was refused as stale", epoch)
		}
		gotEpoch, gotWriter, gotPayload, err := checker.Latest(ctx, race.Plugin, race.Shard)
		switch {
		case errors.Is(err, writefence.ErrCorrupt), errors.Is(err, writefence.ErrNotFound), errors.Is(err, writefence.ErrWire):
			violation("the record is unreadable after the round: %v", err)
		case err != nil:
			round.Errors = append(round.Errors, fmt.Errorf("check: %w", err))
		case len(round.Winners) == 1 && (gotEpoch != epoch || gotWriter != writerName(winner) || !bytes.Equal(gotPayload, pushPayload(r, winner))):
			violation("%s landed epoch %d, but the record holds epoch %d by %s with payload %s",
				writerName(winner), epoch, gotEpoch, escape.String(gotWriter), describe(gotPayload))
		}
		rounds = append(rounds, round)
		if race.Progress != nil {
			race.Progress(round)
		}
	}
	return rounds, ctx.Err()
}

func writerName(i int) string { return fmt.Sprintf("writer-%02d", i) }

// pushPayload is unique per round and writer, so the record names its
// writer twice over.
func pushPayload(round, i int) []byte {
	return fmt.Appendf(nil, "round %d %s", round, writerName(i))
}

// barrier holds each racer's first write of a round until every racer has
// either reached its first write or returned, then releases the waiting
// racers in a random order.
type barrier struct {
	mu      sync.Mutex    // guards counted and pending
	counted []bool        // racer i has reached its first write or returned
	pending int           // racers not yet counted
	all     chan struct{} // closed when pending reaches 0
	open    []chan struct{}
}

func newBarrier(n int) *barrier {
	b := &barrier{counted: make([]bool, n), pending: n, all: make(chan struct{}), open: make([]chan struct{}, n)}
	for i := range b.open {
		b.open[i] = make(chan struct{})
	}
	return b
}

// count marks racer i as counted, once, and reports whether this call did.
func (b *barrier) count(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.counted[i] {
		return false
	}
	b.counted[i] = true
	if b.pending--; b.pending == 0 {
		close(b.all)
	}
	return true
}

// arrive is racer i's write: the first of the round waits for its release.
func (b *barrier) arrive(ctx context.Context, i int) error {
	if !b.count(i) {
		return nil
	}
	select {
	case <-b.open[i]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave is racer i's return from Push; it frees the others if i never wrote.
func (b *barrier) leave(i int) { b.count(i) }

// release waits until every racer is counted and then lets them write.
func (b *barrier) release() {
	<-b.all
	for _, i := range rand.Perm(len(b.open)) {
		close(b.open[i])
	}
}

// describe summarises a payload for a message without dumping it.
func describe(b []byte) string {
	if len(b) <= 32 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:32])
}
