package writefence

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVerdictOnceKeeps: a pass and a final refusal are kept, so the check
// runs no more; any other failure is not, so the next call checks again.
func TestVerdictOnceKeeps(t *testing.T) {
	errRefused := errors.New("refused")
	errFlaky := errors.New("network")
	isFinal := func(err error) bool { return errors.Is(err, errRefused) }
	for _, tc := range []struct {
		name    string
		results []error // what the check returns, call after call
		want    []error // what do returns, call after call
		checks  int     // how many times the check ran
		kept    error   // refusal() at the end
	}{
		{"a pass", []error{nil}, []error{nil, nil, nil}, 1, nil},
		{"a final refusal", []error{errRefused}, []error{errRefused, errRefused, errRefused}, 1, errRefused},
		{"a failure, then a pass", []error{errFlaky, nil}, []error{errFlaky, nil, nil}, 2, nil},
		{"failures, then a refusal", []error{errFlaky, errFlaky, errRefused}, []error{errFlaky, errFlaky, errRefused}, 3, errRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o verdictOnce
			checks := 0
			check := func(context.Context) error {
				err := tc.results[checks]
				checks++
				return err
			}
			for i, want := range tc.want {
				assert.Equal(t, want, o.do(t.Context(), check, isFinal), "call %d", i+1)
			}
			assert.Equal(t, tc.checks, checks)
			assert.Equal(t, tc.kept, o.refusal())
		})
	}
}

// TestVerdictOnceOneCheckAtATime: a caller that comes while a check runs
// waits for it and takes its kept verdict without checking again, or
// gives up when its own ctx ends first; the check runs once.
func TestVerdictOnceOneCheckAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o verdictOnce
		release := make(chan struct{})
		checks := 0
		check := func(context.Context) error {
			checks++
			<-release
			return nil
		}
		never := func(error) bool { return false }

		first := make(chan error, 1)
		go func() { first <- o.do(t.Context(), check, never) }()
		synctest.Wait() // the check runs, held

		ctx, cancel := context.WithCancel(t.Context())
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- o.do(ctx, check, never) }()
		waiter := make(chan error, 1)
		go func() { waiter <- o.do(t.Context(), check, never) }()
		synctest.Wait() // both wait for the check in flight
		cancel()
		require.ErrorIs(t, <-gaveUp, context.Canceled)

		close(release)
		require.NoError(t, <-first)
		require.NoError(t, <-waiter)
		assert.Equal(t, 1, checks, "the waiters took the kept pass")
	})
}
