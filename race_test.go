package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

func TestConflictsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, k := range []int{1, 3, 10 - 1} {
		counting := counted(&writefence.MemStore{}, conflicts(k))
		f := &writefence.Fence{Store: counting}
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")), "k=%d", k)
		assert.Equal(t, int64(k+1), counting.Calls(fakestore.Put))
		assert.Equal(t, int64(k+1), counting.Calls(fakestore.Get), "every conflict re-reads")
		t.Logf("%d injected conflicts: landed after %d writes", k, counting.Calls(fakestore.Put))
	}
}

func TestEndlessConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counting := counted(&writefence.MemStore{}, conflicts(0))
	f := &writefence.Fence{Store: counting, MaxAttempts: 4}
	err := f.Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrConflict)
	require.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, int64(4), counting.Calls(fakestore.Put), "exactly MaxAttempts writes")

	before := counting.Calls(fakestore.Put)
	err = (&writefence.Fence{Store: counting}).Push(ctx, "wal", "0", "a", 1, []byte("x"))
	require.ErrorIs(t, err, writefence.ErrConflict)
	assert.Equal(t, int64(10), counting.Calls(fakestore.Put)-before)
}

// TestRaceSameEpoch: many writers push the same epoch at once; exactly one
// lands per round and every other is refused as stale.
func TestRaceSameEpoch(t *testing.T) {
	const writers, rounds = 64, 200
	ctx := context.Background()
	f := &writefence.Fence{Store: &writefence.MemStore{}}
	var stale, landed int
	for round := 1; round <= rounds; round++ {
		errs := together(writers, func(w int) error {
			return f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), uint64(round), []byte(fmt.Sprintf("r%d w%d", round, w)))
		})
		winner := oneWinner(t, round, errs, writefence.ErrStaleEpoch)
		landed, stale = landed+1, stale+len(errs)-1
		requireLatestIn(t, f, "wal", "0", uint64(round), fmt.Sprintf("w%d", winner), fmt.Sprintf("r%d w%d", round, winner))
	}
	assert.Equal(t, rounds, landed)
	assert.Equal(t, rounds*(writers-1), stale)
	t.Logf("%d rounds of %d writers: %d landed (one per round), %d refused as stale", rounds, writers, landed, stale)
}

// oneWinner returns the index of the one nil error of a round of racers,
// failing t unless exactly one is nil and every other matches want.
func oneWinner(t *testing.T, round int, errs []error, want error) int {
	t.Helper()
	winner := -1
	for w, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "round %d: writers %d and %d both landed", round, winner, w)
			winner = w
			continue
		}
		require.ErrorIs(t, err, want, "round %d writer %d", round, w)
	}
	require.NotEqual(t, -1, winner, "round %d: nobody landed", round)
	return winner
}

func requireLatestIn(t testing.TB, f *writefence.Fence, plugin, shard string, epoch uint64, writer, payload string) {
	t.Helper()
	e, w, p, err := f.Latest(context.Background(), plugin, shard)
	require.NoError(t, err)
	require.Equal(t, epoch, e)
	require.Equal(t, writer, w)
	require.Equal(t, payload, string(p))
}

// TestRaceEpochLadder: writers push epochs in random order; every epoch that
// lands (as the store saw it) is greater than the one before, and the final
// record holds the maximum.
func TestRaceEpochLadder(t *testing.T) {
	const writers, epochsPerWriter, rounds = 16, 8, 20
	ctx := context.Background()
	var landed, stale, lost int
	for round := range rounds {
		// Every record that lands is recorded, under the store's own
		// ordering, so that the test checks the sequence the store saw.
		mem := &writefence.MemStore{}
		reader := &writefence.Fence{Store: mem} // decodes what landed
		var order sync.Mutex                    // held across each write, and guards epochs
		var epochs []uint64
		obs := fakestore.New(mem, fakestore.Options{Hide: fakestore.Declared, Put: func(ctx context.Context, key string, data []byte, expect string) (string, error) {
			order.Lock()
			defer order.Unlock()
			v, err := mem.PutIfVersion(ctx, key, data, expect)
			if err == nil {
				e, _, _, lerr := reader.Latest(ctx, "wal", "0")
				if lerr != nil {
					return "", lerr
				}
				epochs = append(epochs, e)
			}
			return v, err
		}})
		// Each conflict means another writer landed, so with 16 writers the
		// default bound could end the highest epoch's push; raise it.
		f := &writefence.Fence{Store: obs, RetryDelay: 100 * time.Microsecond, MaxAttempts: 256}
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		all := rng.Perm(writers * epochsPerWriter)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range writers {
			mine := all[w*epochsPerWriter : (w+1)*epochsPerWriter]
			wg.Go(func() {
				for _, e := range mine {
					err := f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), uint64(e+1), []byte("x"))
					mu.Lock()
					switch {
					case err == nil:
						landed++
					case isStale(err):
						stale++
					default:
						lost++
						t.Errorf("epoch %d: %v", e+1, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for i := 1; i < len(epochs); i++ {
			require.Greater(t, epochs[i], epochs[i-1], "round %d: landed epochs %v", round, epochs)
		}
		e, _, _, err := f.Latest(ctx, "wal", "0")
		require.NoError(t, err)
		require.Equal(t, uint64(writers*epochsPerWriter), e, "the highest epoch always lands")
	}
	t.Logf("%d rounds, %d writers x %d random epochs: %d landed, %d stale, %d other", rounds, writers, epochsPerWriter, landed, stale, lost)
}

func isStale(err error) bool {
	var s *writefence.StaleEpochError
	return errors.As(err, &s)
}

// TestRaceCatchesBrokenStores shows the same-epoch race has teeth: over a
// store that compares on the client side, or one that ignores
// preconditions, several writers of one epoch land in the same round.
func TestRaceCatchesBrokenStores(t *testing.T) {
	const writers, rounds = 32, 20
	ctx := context.Background()
	stores := map[string]writefence.ConditionalStore{
		"client-side compare":  clientCompare(&writefence.MemStore{}),
		"ignores precondition": ignoring(&writefence.MemStore{}),
	}
	for name, store := range stores {
		f := &writefence.Fence{Store: store}
		worst := 0
		for round := 1; round <= rounds; round++ {
			landed := 0
			for _, err := range together(writers, func(w int) error {
				return f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", w), uint64(round), []byte("x"))
			}) {
				if err == nil {
					landed++
				}
			}
			worst = max(worst, landed)
		}
		assert.Greater(t, worst, 1, "%s: the race never caught a double landing", name)
		t.Logf("%s: up to %d writers landed the same epoch in one round", name, worst)
	}
}
