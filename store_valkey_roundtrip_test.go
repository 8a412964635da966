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
)

// valkeyTap is a go-redis hook that counts round trips: one per command or
// pipeline the client sends (the clients it is put on have MaxRetries -1,
// so no call hides a retry). It records the command names of each, and runs
// before, when set, ahead of every command or pipeline (an error from before
// is returned instead of sending) and after, when set, once the reply is in.
type valkeyTap struct {
	mu     sync.Mutex // guards trips, before and after
	trips  [][]string
	before func(ctx context.Context, cmds []redis.Cmder) error
	after  func(cmds []redis.Cmder)
}

func (h *valkeyTap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *valkeyTap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		cmds := []redis.Cmder{cmd}
		if err := h.observe(ctx, cmds); err != nil {
			return err
		}
		defer h.runAfter(cmds)
		return next(ctx, cmd)
	}
}

func (h *valkeyTap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.observe(ctx, cmds); err != nil {
			return err
		}
		defer h.runAfter(cmds)
		return next(ctx, cmds)
	}
}

func (h *valkeyTap) observe(ctx context.Context, cmds []redis.Cmder) error {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	h.mu.Lock()
	h.trips = append(h.trips, names)
	before := h.before
	h.mu.Unlock()
	if before != nil {
		return before(ctx, cmds)
	}
	return nil
}

func (h *valkeyTap) runAfter(cmds []redis.Cmder) {
	h.mu.Lock()
	after := h.after
	h.mu.Unlock()
	if after != nil {
		after(cmds)
	}
}

// setAfter installs f (nil removes it).
func (h *valkeyTap) setAfter(f func(cmds []redis.Cmder)) {
	h.mu.Lock()
	h.after = f
	h.mu.Unlock()
}

// setBefore installs f (nil removes it).
func (h *valkeyTap) setBefore(f func(ctx context.Context, cmds []redis.Cmder) error) {
	h.mu.Lock()
	h.before = f
	h.mu.Unlock()
}

// take returns the round trips recorded since the last take.
func (h *valkeyTap) take() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

func formatValkeyTrips(trips [][]string) string {
	s := make([]string, len(trips))
	for i, t := range trips {
		s[i] = "[" + strings.Join(t, " ") + "]"
	}
	return strings.Join(s, " ")
}

// newTappedValkeyClient returns a client with a valkeyTap and no retries.
func newTappedValkeyClient(t *testing.T, opts ...func(*redis.Options)) (*redis.Client, *valkeyTap) {
	t.Helper()
	opts = append([]func(*redis.Options){func(o *redis.Options) { o.MaxRetries = -1 }}, opts...)
	c := newValkeyClient(t, opts...)
	tap := &valkeyTap{}
	c.AddHook(tap)
	return c, tap
}

func TestValkeyRoundTrips(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c, tap := newTappedValkeyClient(t)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			prefix := valkeyPrefix(t, c)

			// Warm up: the standalone check, and for the script its first
			// run, which may need EVAL after EVALSHA.
			_, err := store.PutIfVersion(ctx, prefix+"warm", []byte("x"), "")
			require.NoError(t, err)
			// And the client's first pipeline outside a transaction, which
			// dials a connection of the client's separate pipeline pool.
			_, _, err = store.Get(ctx, prefix+"warm")
			require.NoError(t, err)
			t.Logf("first call: %s", formatValkeyTrips(tap.take()))

			put := 2
			if path.script {
				put = 1
			}
			var version string
			steps := []struct {
				name string
				want int
				run  func() error
			}{
				{"create", put, func() (err error) {
					version, err = store.PutIfVersion(ctx, prefix+"k", []byte("a"), "")
					return err
				}},
				{"update", put, func() (err error) {
					version, err = store.PutIfVersion(ctx, prefix+"k", []byte("b"), version)
					return err
				}},
				{"stale update", put, func() error {
					_, err := store.PutIfVersion(ctx, prefix+"k", []byte("c"), strings.Repeat("0", 32))
					return valkeyWantConflict(err)
				}},
				{"create on existing", put, func() error {
					_, err := store.PutIfVersion(ctx, prefix+"k", []byte("c"), "")
					return valkeyWantConflict(err)
				}},
				{"get", 1, func() error {
					_, _, err := store.Get(ctx, prefix+"k")
					return err
				}},
			}
			for _, s := range steps {
				require.NoError(t, s.run(), s.name)
				trips := tap.take()
				t.Logf("%s %s: %d round trips: %s", path.name, s.name, len(trips), formatValkeyTrips(trips))
				assert.Len(t, trips, s.want, "%s: %s", s.name, formatValkeyTrips(trips))
			}
		})
	}
}

func valkeyWantConflict(err error) error {
	if errors.Is(err, writefence.ErrConflict) {
		return nil
	}
	return errors.New("want a conflict, got " + valkeyErrString(err))
}

func valkeyErrString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestValkeyCheckIsRemembered: the standalone check costs one INFO on the
// first call, none later; a failed check is not remembered.
func TestValkeyCheckIsRemembered(t *testing.T) {
	ctx := context.Background()
	c, tap := newTappedValkeyClient(t)
	store := writefence.NewValkeyConditionalStore(c)
	key := valkeyPrefix(t, c) + "k"

	failure := errors.New("injected transient failure")
	tap.setBefore(func(_ context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "info" {
			return failure
		}
		return nil
	})
	_, _, err := store.Get(ctx, key)
	require.ErrorIs(t, err, failure)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	assert.Equal(t, [][]string{{"info"}}, tap.take(), "no key was read after the failed check")

	tap.setBefore(nil)
	for range 3 {
		_, _, err = store.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
	}
	infos := 0
	for _, trip := range tap.take() {
		if trip[0] == "info" {
			infos++
		}
	}
	assert.Equal(t, 1, infos, "checked again after the failure, then remembered")
}
