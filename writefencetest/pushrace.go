package writefencetest

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
)

// PushRace describes a race of Fence.Push calls for RacePush: the scratch
// shard and the size of the race.
type PushRace struct {
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
	Progress func(PushRound)
}

// PushRound is what one round of RacePush saw.
type PushRound struct {
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

// RacePush races Fence.Push calls at one epoch per round on store and
// reports each round. On a store whose conditional write is real exactly one
// push per round lands, every other is refused as stale, and the record the
// round leaves is the winner's.
//
// The contention is forced, not hoped for. Each writer has its own Fence
// over its own view of store, and its first PutIfVersion of a round waits
// until every writer has reached its first PutIfVersion or returned: every
// writer has read the same record (or skipped the read on the version its
// Fence remembers from winning the round before) before any of them writes.
// The waiting writers are then released one by one in a random order, so
// that on a fast local store the same writer does not win every round. A
// store that ignores preconditions lets every writer land, in every round.
//
// RacePush returns the rounds it ran. Its error is ctx's when ctx ends
// before the last round (the rounds run so far are returned with it), or
// says why race cannot be run; failures within a round are in the round.
func RacePush(ctx context.Context, store writefence.ConditionalStore, race PushRace) ([]PushRound, error) {
	switch {
	case store == nil:
		return nil, errors.New("writefencetest: RacePush: nil store")
	case race.Writers < 2 || race.Rounds < 1:
		return nil, fmt.Errorf("writefencetest: RacePush: %d writers and %d rounds; want at least 2 writers and 1 round", race.Writers, race.Rounds)
	}
	views := make([]*gatedStore, race.Writers)
	fences := make([]*writefence.Fence, race.Writers)
	for i := range fences {
		views[i] = &gatedStore{store: store, racer: i}
		var view writefence.ConditionalStore = views[i]
		if _, ok := store.(writefence.PrefixReader); ok {
			view = gatedPrefixStore{views[i]}
		}
		fences[i] = &writefence.Fence{Store: view, Prefix: race.Prefix}
	}
	checker := &writefence.Fence{Store: store, Prefix: race.Prefix}

	var rounds []PushRound
	for r := 1; r <= race.Rounds && ctx.Err() == nil; r++ {
		epoch := uint64(r)
		b := newBarrier(race.Writers)
		for _, v := range views {
			v.setBarrier(b)
		}
		errs := make([]error, race.Writers)
		var wg sync.WaitGroup
		for i, f := range fences {
			wg.Go(func() {
				errs[i] = f.Push(ctx, race.Plugin, race.Shard, writerName(i), epoch, pushPayload(r, i))
				b.leave(i)
			})
		}
		b.release()
		wg.Wait()

		round := PushRound{Round: r, Epoch: epoch, Winners: []string{}}
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

// gatedStore is one racer's view of the store: its writes pass the round's
// barrier first.
type gatedStore struct {
	store writefence.ConditionalStore
	racer int

	mu sync.Mutex // guards b
	b  *barrier
}

func (g *gatedStore) setBarrier(b *barrier) {
	g.mu.Lock()
	g.b = b
	g.mu.Unlock()
}

func (g *gatedStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return g.store.Get(ctx, key)
}

func (g *gatedStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if err := g.arrive(ctx); err != nil {
		return "", err
	}
	return g.store.PutIfVersion(ctx, key, data, expect)
}

// arrive passes the round's barrier before a write.
func (g *gatedStore) arrive(ctx context.Context) error {
	g.mu.Lock()
	b := g.b
	g.mu.Unlock()
	return b.arrive(ctx, g.racer)
}

// PutPartsIfVersion passes the barrier as PutIfVersion does. It writes
// through the store's own PartsPutter when it has one, so a Fence racing
// over the view takes the write path it takes over the store itself.
func (g *gatedStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	pp, ok := g.store.(writefence.PartsPutter)
	if !ok {
		return g.PutIfVersion(ctx, key, bytes.Join(parts, nil), expect)
	}
	if err := g.arrive(ctx); err != nil {
		return "", err
	}
	return pp.PutPartsIfVersion(ctx, key, parts, expect)
}

// gatedPrefixStore keeps the store's PrefixReader visible to the Fence, so
// the race exercises the read path the store's users take.
type gatedPrefixStore struct{ *gatedStore }

func (g gatedPrefixStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return g.store.(writefence.PrefixReader).GetPrefix(ctx, key, n)
}
