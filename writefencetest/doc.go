// Package writefencetest checks an implementation of
// writefence.ConditionalStore against the contract the fence relies on.
//
// A store author calls TestConditionalStore from a test, with a constructor
// for the store under test:
//
//	func TestMyStore(t *testing.T) {
//		writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore {
//			return mystore.New(client, bucket)
//		}, nil)
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
//   - a token is never reused for other bytes after a delete and a
//     re-create (when the store implements writefence.Deleter): a key is
//     created, updated and deleted three times over, and no token returned
//     by a write or a read may name two different contents;
//   - reads are consistent under concurrent overwrite: one writer writes
//     50 contents that name themselves while 4 readers read the key
//     without pause (and once more after the last write); afterwards every
//     read must pair its bytes with the token the write of those bytes
//     returned, never with another write's;
//   - optional capabilities match Get, as testing/fstest checks them: when
//     the store implements writefence.PrefixReader, GetPrefix returns the
//     leading bytes, the size and the version a Get returns, for n smaller
//     than the object, equal to it and larger, right after each write (a
//     version that lags a write fails), it reports a missing or deleted
//     key as writefence.ErrNotFound, and the readers of the overwrite check
//     use it too; when the store implements writefence.PartsPutter,
//     PutPartsIfVersion stores the joined parts and honours every
//     precondition as PutIfVersion does, sharing its version tokens, keeps no
//     reference to the parts, and is the write path the Fence races take; a
//     store that implements writefence.Deleter must make the deleted key
//     read as ErrNotFound and refuse an update with its last token; when
//     the store implements writefence.BrandedPutter, PutIfBranded refuses
//     an absent brand key and one of another identity with
//     writefence.ErrWire, writing nothing, lands as PutIfVersion does when
//     the brand matches, and refuses the next write once the brand key
//     changes or is deleted;
//   - empty, binary (all 256 byte values) and 1 MiB payloads round-trip, so
//     the store's read limit must allow 1 MiB;
//   - the store keeps no reference to the caller's slices, in either
//     direction;
//   - a cancelled context makes Get and PutIfVersion fail with an error
//     matching context.Canceled, and the cancelled write writes nothing;
//   - races: 16 goroutines update one key with the token they all read, 16
//     create one new key, and 16 writers push the same epoch through
//     writefence.Fence (RacePush), 20 rounds each; every round must have
//     exactly one winner, every loser must get ErrConflict (ErrStaleEpoch
//     through the Fence), and Latest must return the winner's push.
//
// Each subtest calls newStore afresh and uses keys under a random prefix of
// its own, so newStore may return the same store, over one shared bucket or
// database, every time. When the store also implements writefence.Deleter,
// each subtest deletes the keys it used when it ends; otherwise they are
// left behind under the prefix "writefencetest/".
//
// Races are forced, not hoped for. In every round of every race, each racer
// has read the same version before any racer writes: the update race reads
// before a gate that all goroutines pass together, the create race needs
// no read (every racer expects the key absent), and RacePush holds each
// writer's first PutIfVersion of a round until every writer has reached
// its own (or returned), then releases them one by one in a random order.
// A store that ignores preconditions therefore lets every racer land, and
// fails every race in every run, on any machine. RacePush is exported so
// that tools can run the same race against a live store; the writefence
// command's race does.
//
// What a barrier cannot force is the gap inside the store itself. A store
// that reads, compares on the client and then writes is caught when two
// racers' compares fall before either's write, which the gate makes likely
// when the store makes a network round trip between them; a compare and a
// write a few instructions apart in memory may slip through, and a data
// race inside the store's own code only shows with the race detector. Run
// the suite with go test -race, and against the real server the store
// talks to, not a mock of it.
package writefencetest
