package pushrace_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/pushrace"
)

// ignoringStore ignores preconditions entirely, as some S3-compatible
// services do with If-Match and If-None-Match.
type ignoringStore struct{ writefence.MemStore }

func (s *ignoringStore) PutIfVersion(ctx context.Context, key string, data []byte, _ string) (string, error) {
	for {
		_, current, err := s.MemStore.Get(ctx, key)
		if err != nil && !errors.Is(err, writefence.ErrNotFound) {
			return "", err
		}
		v, err := s.MemStore.PutIfVersion(ctx, key, data, current)
		if !errors.Is(err, writefence.ErrConflict) {
			return v, err
		}
	}
}

// TestForcesContention: every writer reads before any writes, so on a store
// that ignores preconditions every writer lands in every round; on MemStore
// exactly one does, and the random release makes the winner vary.
func TestForcesContention(t *testing.T) {
	const writers, rounds = 8, 20
	race := pushrace.Race{Writers: writers, Rounds: rounds, Plugin: "p", Shard: "s"}

	got, err := pushrace.Run(t.Context(), new(ignoringStore), race)
	require.NoError(t, err)
	require.Len(t, got, rounds)
	for _, r := range got {
		require.Len(t, r.Winners, writers, "round %d: a store that ignores preconditions lets every writer land", r.Round)
		require.NotEmpty(t, r.Violations, "round %d", r.Round)
	}

	var progress []int
	race.Progress = func(r pushrace.Round) { progress = append(progress, r.Round) }
	got, err = pushrace.Run(t.Context(), new(writefence.MemStore), race)
	require.NoError(t, err)
	require.Len(t, got, rounds)
	winners := map[string]int{}
	for _, r := range got {
		require.Len(t, r.Winners, 1, "round %d", r.Round)
		require.Equal(t, writers-1, r.Stale, "round %d", r.Round)
		require.Empty(t, r.Errors, "round %d", r.Round)
		require.Empty(t, r.Violations, "round %d", r.Round)
		winners[r.Winners[0]]++
	}
	require.Greater(t, len(winners), 1, "one writer won every round: %v", winners)
	require.Len(t, progress, rounds, "Progress is called once per round")
}

// TestStopsWithContext: a done context ends the race with its error.
func TestStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	race := pushrace.Race{Writers: 4, Rounds: 1000, Plugin: "p", Shard: "s",
		Progress: func(r pushrace.Round) {
			if r.Round == 3 {
				cancel()
			}
		}}
	got, err := pushrace.Run(ctx, new(writefence.MemStore), race)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, got, 3)

	_, err = pushrace.Run(t.Context(), new(writefence.MemStore), pushrace.Race{Writers: 1, Rounds: 1})
	require.Error(t, err, "one writer is no race")
}
