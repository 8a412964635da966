// Package writefencetest checks an implementation of
// writefence.ConditionalStore against the contract the fence relies on.
//
// A store author calls TestConditionalStore from a test, with a constructor
// for the store under test:
//
//	func TestMyStore(t *testing.T) {
//		writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore {
//			return mystore.New(client, bucket)
//		})
//	}
//
// The suite runs one named subtest per clause of the contract, so a failure
// says which clause broke:
//
//   - Get of a key never written matches writefence.ErrNotFound;
//   - a create-only put (expectVersion "") creates the key and returns a
//     non-empty token; a second one matches writefence.ErrConflict and
//     changes nothing;
//   - Get returns exactly the bytes written and the token the write
//     returned; an update with the current token lands and returns a new
//     token; an update with a stale token, or with any token on a key that
//     does not exist, matches ErrConflict and writes nothing;
//   - a token never names two contents: after writes A then B, Get never
//     pairs B with A's token;
//   - empty, binary (all 256 byte values) and 1 MiB payloads round-trip, so
//     the store's read limit must allow 1 MiB;
//   - the store keeps no reference to the caller's slices, in either
//     direction;
//   - a cancelled context makes Get and PutIfVersion fail with an error
//     matching context.Canceled, and the cancelled write writes nothing;
//   - races: 16 goroutines update one key with the same token, 16 create
//     one new key, and 16 writers push the same epoch through a
//     writefence.Fence, 20 rounds each; every round must have exactly one
//     winner and every loser must get ErrConflict (ErrStaleEpoch through
//     the Fence). A store that reads, compares on the client and then
//     writes unconditionally fails here.
//
// Each subtest calls newStore afresh and uses keys under a random prefix of
// its own, so newStore may return the same store, over one shared bucket or
// database, every time. When the store also implements writefence.Deleter,
// each subtest deletes the keys it used when it ends; otherwise they are
// left behind under the prefix "writefencetest/".
//
// Races can be missed. The concurrent subtests make 16 goroutines meet in
// the store at once, round after round. That reliably catches a store that
// does anything between its compare and its write (a network round trip;
// a sleep of one microsecond was caught in 40 runs out of 40), but a
// compare and a write a few instructions apart in memory may slip through, and a data race inside the store's own code only shows
// with the race detector. Run the suite with go test -race, and against the
// real server the store talks to, not a mock of it.
package writefencetest
