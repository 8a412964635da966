package writefencetest_test

import (
	"fmt"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// A store's own _test.go file runs the suite from a test function:
//
//	func TestMyStore(t *testing.T) {
//		writefencetest.TestConditionalStore(t, newStore, nil)
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
		writefencetest.TestConditionalStore(t, newStore, nil)
	}
	fmt.Printf("%T\n", testMyStore)
	// Output: func(*testing.T)
}
