package writefencetest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// A store's own _test.go file runs the suite from a test function:
//
//	func TestMyStore(t *testing.T) {
//		writefencetest.TestConditionalStore(t, newStore)
//	}
//
// An example has no *testing.T to give it, so this one builds that test
// function and shows its type; this package's tests run the suite against
// MemStore, one store per subtest and one shared by all.
func ExampleTestConditionalStore() {
	// One store for every subtest is fine: each subtest works under a random
	// key prefix of its own, as it would in one shared bucket or database.
	store := new(writefence.MemStore)
	newStore := func(t *testing.T) writefence.ConditionalStore {
		return store
	}

	testMyStore := func(t *testing.T) {
		writefencetest.TestConditionalStore(t, newStore)
	}
	fmt.Printf("%T\n", testMyStore)
	// Output: func(*testing.T)
}

// RacePush races writers of one epoch per round on a live store, as the
// writefence command's race does; on a store with a real conditional write
// every round has exactly one winner.
func ExampleRacePush() {
	rounds, err := writefencetest.RacePush(context.Background(), new(writefence.MemStore), writefencetest.PushRace{
		Writers: 8, Rounds: 5,
		Plugin: "example", Shard: "race",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rounds {
		fmt.Printf("epoch %d: %d winner, %d stale, %d violations\n", r.Epoch, len(r.Winners), r.Stale, len(r.Violations))
	}
	// Output:
	// epoch 1: 1 winner, 7 stale, 0 violations
	// epoch 2: 1 winner, 7 stale, 0 violations
	// epoch 3: 1 winner, 7 stale, 0 violations
	// epoch 4: 1 winner, 7 stale, 0 violations
	// epoch 5: 1 winner, 7 stale, 0 violations
}
