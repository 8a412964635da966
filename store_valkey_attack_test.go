//go:build !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// Writes against a real server under interleavings the server allows but a
// quiet test never meets.

// valkeySplit is a go-redis hook that sends the next pipeline starting with
// WATCH in two parts, its first at commands and then the rest, and runs
// between, once the server answered the first part, a function that writes
// on another connection. The server runs the commands of one connection in
// order but interleaves other connections' commands between any two of
// them, whenever the bytes of a pipeline reach it in more than one read (a
// split TCP segment, a slow link): the hook makes that interleaving certain.
type valkeySplit struct {
	mu      sync.Mutex // guards the fields below
	at      int
	between func()
}

// arm makes the next WATCH pipeline run between after its first at
// commands.
func (s *valkeySplit) arm(at int, between func()) {
	s.mu.Lock()
	s.at, s.between = at, between
	s.mu.Unlock()
}

func (s *valkeySplit) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *valkeySplit) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *valkeySplit) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.mu.Lock()
		at, between := s.at, s.between
		split := between != nil && len(cmds) > at && cmds[0].Name() == "watch"
		if split {
			s.between = nil
		}
		s.mu.Unlock()
		if !split {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds[:at]); err != nil {
			return err
		}
		between()
		return next(ctx, cmds[at:])
	}
}

// newSplitValkeyClient returns a client of the shared server with a
// valkeySplit.
func newSplitValkeyClient(t *testing.T) (*redis.Client, *valkeySplit) {
	t.Helper()
	c := newValkeyClient(t)
	split := &valkeySplit{}
	c.AddHook(split)
	return c, split
}

// TestValkeyWatchTornReadIsNoDamage: the WATCH path reads the length, the
// head and the tail of the value in one pipeline after its WATCH, not in
// one atomic step, so a rival's write can land between two of those reads.
// The write's own EXEC would then abort: the call must report a conflict,
// as the Script path does, and never damage in an intact value (a
// *CorruptError is final, and its version would name intact bytes).
func TestValkeyWatchTornReadIsNoDamage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		at           int // the commands of the WATCH pipeline sent before the rival's write
		first, rival int // the sizes of the data replaced and of the rival's
	}{
		{"the length before the rival's write, the head after", 2, 5, 40},
		{"the head before the rival's write, the tail after", 4, 8000, 8000},
	} {
		t.Run(strings.ReplaceAll(tc.name, "'", ""), func(t *testing.T) {
			c, split := newSplitValkeyClient(t)
			store := newValkeyStore(c, false)
			rival := newValkeyStore(newValkeyClient(t), false)
			key := valkeyPrefix(t, c) + "torn"

			v, err := store.PutIfVersion(ctx, key, benchPayload(tc.first), "")
			require.NoError(t, err)
			rivalData := benchPayload(tc.rival)
			rivalData[0]++
			rivalData[len(rivalData)-1]++
			var rivalVersion string
			var rivalErr error
			split.arm(tc.at, func() { rivalVersion, rivalErr = rival.PutIfVersion(ctx, key, rivalData, v) })

			_, err = store.PutIfVersion(ctx, key, []byte("mine"), v)
			require.NoError(t, rivalErr, "the rival's write lands between the reads")
			assert.NotErrorIs(t, err, writefence.ErrCorrupt, "the value is intact")
			require.ErrorIs(t, err, writefence.ErrConflict, "the rival's write landed first")
			requireValkeyContent(t, store, key, string(rivalData), rivalVersion)
		})
	}
}

// TestValkeyWatchTornReadSameEpoch: two Fences push one epoch, the second
// on the WATCH path, and the first lands between the second's reads of the
// record's length and head. Promise 2: the second is refused as stale;
// promise 18: its Deposed context ends with the *StaleEpochError.
func TestValkeyWatchTornReadSameEpoch(t *testing.T) {
	ctx := context.Background()
	c, split := newSplitValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	a := &writefence.Fence{Store: newValkeyStore(newValkeyClient(t), false), Prefix: prefix}
	b := &writefence.Fence{Store: newValkeyStore(c, false), Prefix: prefix}

	require.NoError(t, a.Push(ctx, "p", "s", "a", 1, []byte("one")))
	_, _, _, err := b.Latest(ctx, "p", "s")
	require.NoError(t, err)
	deposed, stop := b.Deposed(ctx, "p", "s")
	defer stop()

	var aErr error
	split.arm(2, func() { aErr = a.Push(ctx, "p", "s", "a", 2, []byte("a payload longer than b's")) })
	err = b.Push(ctx, "p", "s", "b", 2, []byte("b's"))
	require.NoError(t, aErr, "a's push lands between b's reads")
	require.ErrorIs(t, err, writefence.ErrStaleEpoch, "promise 2: b is refused as stale")
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, context.Cause(deposed), &stale, "promise 18: b is deposed")
	assert.False(t, errors.Is(err, writefence.ErrCorrupt), "the record is intact: %v", err)

	epoch, writer, payload, err := b.Latest(ctx, "p", "s")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), epoch)
	assert.Equal(t, "a", writer)
	assert.Equal(t, "a payload longer than b's", string(payload))
}

// TestValkeyWatchTornBrandRead: the WATCH path reads whether the brand key
// exists and then its value, in the pipeline after its WATCH; a brand
// deleted between the two reads is absent, never a damaged brand (a
// *CorruptError is final). The write refuses as the Script path does (the
// brand is absent) or as a conflict (its EXEC would abort), and writes
// nothing.
func TestValkeyWatchTornBrandRead(t *testing.T) {
	ctx := context.Background()
	c, split := newSplitValkeyClient(t)
	other := newValkeyClient(t)
	store := newValkeyStore(c, false)
	prefix := valkeyPrefix(t, c)
	brand, key := keys.Brand(prefix), prefix+"data"
	_, err := store.PutIfVersion(ctx, brand, []byte(defaults.Identity), "")
	require.NoError(t, err)
	v, err := store.PutIfBranded(ctx, brand, defaults.Identity, key, [][]byte{[]byte("one")}, "")
	require.NoError(t, err)
	raw := valkeyRaw(t, c, key)

	var delErr error
	// WATCH, STRLEN, EXISTS, GETRANGE and GETRANGE of the key, EXISTS of
	// the brand key: then the brand key goes.
	split.arm(6, func() { delErr = other.Del(ctx, brand).Err() })
	_, err = store.PutIfBranded(ctx, brand, defaults.Identity, key, [][]byte{[]byte("two")}, v)
	require.NoError(t, delErr)
	assert.NotErrorIs(t, err, writefence.ErrCorrupt, "the brand was never damaged")
	assert.True(t, errors.Is(err, writefence.ErrWire) || errors.Is(err, writefence.ErrConflict),
		"the brand is absent, or changed under the write: %v", err)
	assert.Equal(t, raw, valkeyRaw(t, c, key), "nothing was written")
}

// TestValkeyMixedPathsOneWinner: writers on both paths race one version of
// one key, with values at the Script path's boundary (2 KiB of data, sent
// in the script's call, and one byte more, staged). Exactly one write
// lands, whichever path it took; the others are conflicts and write
// nothing; Get pairs the winner's bytes with the winner's version; no
// staged value is left behind.
func TestValkeyMixedPathsOneWinner(t *testing.T) {
	const writers, rounds = 8, 20
	ctx := context.Background()
	addr := testserver.StartValkey(t, "") // a server of its own: no other test stages values on it
	c := newValkeyClient(t, func(o *redis.Options) { o.Addr, o.PoolSize = addr, writers })
	stores := []*writefence.ValkeyStore{newValkeyStore(c, false), newValkeyStore(c, true)}
	key := "mixed"
	version, err := stores[0].PutIfVersion(ctx, key, []byte("start"), "")
	require.NoError(t, err)
	for round := range rounds {
		datas, versions := make([][]byte, writers), make([]string, writers)
		errs := together(writers, func(w int) error {
			datas[w] = benchPayload(2<<10 + w%2)
			datas[w][0], datas[w][1] = byte(round), byte(w)
			var err error
			versions[w], err = stores[w/2%2].PutIfVersion(ctx, key, datas[w], version)
			return err
		})
		winner := -1
		for w, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: writers %d and %d both landed", round, winner, w)
				winner = w
				continue
			}
			require.ErrorIs(t, err, writefence.ErrConflict, "round %d writer %d", round, w)
		}
		require.NotEqual(t, -1, winner, "round %d: one write lands", round)
		requireValkeyContent(t, stores[0], key, string(datas[winner]), versions[winner])
		version = versions[winner]
	}
	staged, err := c.Keys(ctx, keys.Staging+"*").Result()
	require.NoError(t, err)
	assert.Empty(t, staged, "no staged value is left behind")
}
