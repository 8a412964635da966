package writefence_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// What the tests of the stores share: the conformance suite's options
// for the adapters, and the check of a read over the limit.

// kitReadLimit is the read limit the adapters' conformance runs set on
// their stores, so the suite checks ErrTooLarge without writing 64 MiB.
const kitReadLimit = 2 << 20

// kitOptions are the conformance suite's options for a store whose bytes
// damage reaches from outside it and whose read limit is kitReadLimit,
// with Get/UnderOverwrite sized as testserver.KitOverwriteReads says.
func kitOptions(damage testserver.Damager) *writefencetest.Options {
	return &writefencetest.Options{
		Damage: func(ctx context.Context, key string, f writefencetest.Fault) error {
			return damage(ctx, key, testserver.Fault(f))
		},
		ReadLimit:      kitReadLimit,
		OverwriteReads: testserver.KitOverwriteReads(),
	}
}

// requireTooLarge checks that err refuses a read of key, an object over
// limit bytes: it matches ErrTooLarge and is a *StoreError that names key
// and limit.
func requireTooLarge(t *testing.T, err error, key string, limit int64) {
	t.Helper()
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, key, se.Key)
	assert.ErrorContains(t, err, fmt.Sprintf("object too large: more than %d bytes", limit))
}
