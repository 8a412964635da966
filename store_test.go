package writefence_test

import (
	"context"

	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// What the tests of the stores share: the conformance suite's options
// for the adapters.

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
