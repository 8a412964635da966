package writefence_test

import (
	"context"
	"testing"

	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// Forwarders to internal/testserver for the test files that still call
// the old names.

func uniqueName(t testing.TB) string { return testserver.UniqueName(t) }

// kitReadLimit is the read limit the adapters' conformance runs set on
// their stores, so the suite checks ErrTooLarge without writing 64 MiB.
const kitReadLimit = 2 << 20

// kitOptions are the conformance suite's options for a store whose bytes
// damage reaches from outside it and whose read limit is kitReadLimit.
func kitOptions(damage testserver.Damager) *writefencetest.Options {
	return &writefencetest.Options{
		Damage: func(ctx context.Context, key string, f writefencetest.Fault) error {
			return damage(ctx, key, testserver.Fault(f))
		},
		ReadLimit: kitReadLimit,
	}
}
