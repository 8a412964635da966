// Package writefencetest checks an implementation of
// writefence.ConditionalStore against the contract the fence relies on.
//
// A store author calls TestConditionalStore from a test, with a constructor
// for the store under test and, optionally, the options only the author can
// give:
//
//	func TestMyStore(t *testing.T) {
//		writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore {
//			return mystore.New(client, bucket)
//		}, &writefencetest.Options{Damage: damageMyStore, ReadLimit: 64 << 20})
//	}
//
// Run it with go test -race, against the real server the store talks to,
// not a mock of it.
//
// # What is checked: the paths a Fence runs
//
// The suite reads and writes the store as a writefence.Fence does: reads
// with Get and writefence.GetPrefix, writes with writefence.PutParts (the
// bytes in two parts) and writefence.PutIfBranded. Those helpers use the
// store's own GetPrefix, PutPartsIfVersion and PutIfBranded only when the
// store declares them (writefence.Capable), and otherwise fall back to Get
// and PutIfVersion; so on any store the suite checks exactly the methods a
// Fence on that store calls, the fallbacks included, and every subtest of a
// capability logs which method it resolved to. The clauses about a refused
// write are checked through the store's PutIfVersion and through PutParts
// both. Deleter and Lister are found by type assertion, as the Fence's
// tools find them.
//
// # The checks
//
// One named subtest per clause, so a failure says which clause broke:
//
//   - Get/Missing: Get of a key never written matches writefence.ErrNotFound
//     and not ErrConflict.
//   - Get/UnderOverwrite: one writer overwrites a key without pause while 8
//     readers read it, alternately with Get and GetPrefix; every read must
//     pair its bytes (or prefix and size) with the version of the write that
//     stored them. The writer keeps writing until the readers have made
//     21,000 reads that overlap a write (a read that began after the
//     writer's first write returned, and before some later write returned,
//     and ended after that write began), and at least 50 writes. A store
//     that pairs one write's bytes with another's version on 1 read in 3,000
//     under overwrite, as some S3-compatible servers do, is caught with
//     chance 1 - e^-7: it passes unseen in fewer than 1 run in 1,000. It
//     takes about 10 s against MinIO and 3 s against fake-gcs-server on a
//     loaded 2-core machine.
//   - Get/TooLarge (with Options.ReadLimit): an object of exactly the limit
//     is read whole by Get and GetPrefix; one byte more is refused by both
//     with writefence.ErrTooLarge. Refusing either object at write time
//     with ErrInvalidArgument or ErrTooLarge, writing nothing, also passes.
//   - Create/NewKey, Create/Existing: a create-only write (expectVersion "")
//     lands with a non-empty token; a second one matches ErrConflict and
//     changes nothing.
//   - Update/Current, Update/Stale, Update/Missing, Update/Deleted (with a
//     Deleter): an update with the current token lands with a new token;
//     one with a stale token, with a made-up or another key's token on a
//     missing key, or with the last token of a deleted key matches
//     ErrConflict and writes nothing.
//   - Update/Malformed: a version of a form the store never issues ("not a
//     token", one with a NUL, "*", the current token quoted or followed by
//     a space, "0") cannot equal the current one: the write matches
//     ErrConflict, not another error, and writes nothing, on an existing and
//     on a missing key.
//   - Tokens/NameContents: after writes A then B, Get never pairs B with A's
//     token.
//   - Tokens/AfterDelete (with a Deleter): a key is created, updated and
//     deleted three times over, and no token returned by a write or a read
//     may name two different contents.
//   - Errors/NotFound, Errors/Conflict: the not-found of Get and GetPrefix,
//     and the conflict of every refused precondition (through
//     PutIfVersion, PutParts and PutIfBranded), are a
//     *writefence.StoreError whose Key is the key and whose Op is set,
//     matching the sentinel, as fs.PathError is for a path.
//   - GetPrefix/MatchesGet, GetPrefix/Missing: GetPrefix returns the leading
//     bytes, the size and the version a Get returns, for n smaller than the
//     object, equal to it and larger, right after each write (a version
//     that lags a write fails); a missing or deleted key is ErrNotFound.
//   - PutParts/MatchesPut, PutParts/Aliasing: PutParts stores the joined
//     parts and honours every precondition as PutIfVersion does, sharing its
//     version tokens, and keeps no reference to the parts.
//   - Branded/Absent, Branded/Other, Branded/Matching, Branded/Changed:
//     PutIfBranded refuses an absent brand key and one of another identity
//     with a *writefence.WireError (ErrWire), writing nothing; lands as
//     PutParts does when the brand matches; and refuses the next write
//     once the brand key changes or is deleted. A store that refuses
//     PutIfBranded of the suite's keys as unsupported (it cannot read them
//     in one atomic step) skips these checks and the branded races; see
//     Options.KeyPrefix.
//   - Damage/Flip, Damage/Empty, Damage/Twice (with Options.Damage): after a
//     bit is flipped (and then a second one), after the value is emptied,
//     and after the same damage twice with a repair in between, Get either
//     returns a *writefence.CorruptError (ErrCorrupt) whose Version is none
//     of the intact versions seen (and whose Head, if set, starts the
//     damaged bytes), or returns the damaged bytes under a version no intact
//     write returned; a write conditioned on a version from before the
//     damage ("" included) is refused with ErrCorrupt or ErrConflict and
//     writes nothing; a write conditioned on the version Get reported
//     replaces the bytes; and GetPrefix agrees with Get throughout. These
//     values are small, within the part of an object any store checks.
//   - Damage/Middle (with Options.Damage): a bit flipped in the middle of a
//     64 KiB value (or Options.ReadLimit bytes, when less), beyond the
//     bounded part a store may check on its writes (see
//     writefence.ConditionalStore): Get reports it as above, and so does
//     GetPrefix of the whole value; GetPrefix of fewer bytes reports it
//     too, or returns the version from before the damage with the leading
//     bytes as they are; a write conditioned on that version is refused as
//     over any damage, or lands and replaces the value whole; a write
//     conditioned on the version Get reported lands.
//   - Lister/Prefix, Lister/Stop, Lister/Canceled (with a Lister): every key
//     written under a prefix, at any depth, is listed exactly once, none
//     outside it, and a deleted key is not; List stops at fn's first error
//     and returns it; a context cancelled before the listing, or by fn
//     during it, makes List return an error matching context.Canceled.
//   - Payload/Empty, Payload/AllBytes, Payload/1MiB: empty, binary (all 256
//     byte values) and 1 MiB payloads round-trip, so the store's read limit
//     must allow 1 MiB (or Options.ReadLimit bytes, when less, are written).
//   - Aliasing/Put, Aliasing/Get: the store keeps no reference to the
//     caller's slices, in either direction.
//   - Canceled/Get, Canceled/Put: a cancelled context makes Get, GetPrefix
//     and every write fail with an error matching context.Canceled, and the
//     cancelled write writes nothing.
//   - Race/Update, Race/Create: 16 goroutines update one key through
//     PutParts with the version they all read, or create one new key, 20
//     rounds each; exactly one write per round lands, every other matches
//     ErrConflict, and the key holds the winner's bytes and version.
//   - Race/Branded: the same for PutIfBranded under a brand key that holds
//     the identity.
//   - Race/BrandFlip: rounds of Race/Branded alternate with rounds in which,
//     after every goroutine has read the version and before any writes, the
//     brand key is changed to another identity: every write of such a round
//     is refused with a *writefence.WireError and the key keeps its bytes
//     and version.
//   - Race/FencePush: 16 writers, each with a writefence.Fence of its own,
//     push the same epoch to one shard, the epoch rising each round, 20
//     rounds; exactly one push per epoch lands, every other matches
//     writefence.ErrStaleEpoch, and Latest returns the winner's push.
//
// A check whose optional interface or option is missing is skipped, saying
// why.
//
// Each subtest calls newStore afresh and uses keys under a random prefix of
// its own, so newStore may return the same store, over one shared bucket or
// database, every time. When the store also implements writefence.Deleter,
// each subtest deletes the keys it used when it ends; otherwise they are
// left behind under the prefix "writefencetest/".
//
// # Races are forced
//
// In every round of every race, each racer has read the same version
// before any racer writes: the races of the store's methods read before a
// barrier all goroutines pass together (the create race needs no read,
// every racer expects the key absent), and Race/FencePush holds each
// writer's first conditional write of a round at a barrier inside the
// Fence's own write engine until every writer has reached its own (or
// returned). A store that ignores preconditions therefore lets every racer
// land and fails every race in every run, on any machine; so does a store
// whose write compares the version on the client with a round trip to the
// server between the compare and the write, and a store that checks the
// brand once and remembers it fails Race/BrandFlip in every run.
//
// # What the suite cannot check
//
//   - A compare and a write a few instructions apart in memory. A barrier
//     can hold racers before the store's method, not inside it: a store that
//     compares on the client and then writes is caught when two racers'
//     compares fall before either's write, which the barrier makes certain
//     only when a round trip separates them. The fallback of
//     writefence.PutIfBranded on a store without a BrandedPutter has exactly
//     such a gap (a re-brand between its Get of the brand key and its write
//     goes unseen); the suite checks that path only with the brand changed
//     before the write, as Race/BrandFlip does.
//   - A data race inside the store's own code, which only the race detector
//     shows: run with -race.
//   - A store that lies only under load, at a scale or a rate the suite does
//     not reach, or only against a server other than the one it runs
//     against. Run it against the real server, not a mock; Get/UnderOverwrite
//     still misses a store that tears on 1 read in 3,000 in about 1 run in
//     1,100, and a rarer tear more often.
//   - Durability: that a write which returned survives the store's own
//     failover (a Valkey replica promoted before it had the write, a crash
//     before a file reached the disk). No check kills or fails over the
//     server.
//   - Damage, without Options.Damage: the suite has no way of its own to
//     change a store's bytes behind its back, and the read limit, without
//     Options.ReadLimit. Only the author knows both.
//   - Throttling, timeouts, lost replies and partial failures of the
//     network: the suite sees the server answer normally. A write whose
//     reply is lost must be reported as an error that is not ErrConflict;
//     no check loses one.
//   - Tokens over a store's whole lifetime: a token reused only after many
//     writes, after a restart of the server, or across buckets or databases
//     is not seen by checks that make a few thousand writes.
//   - Keys the suite does not write: very long keys, keys of unusual bytes,
//     and a key that is also the "directory" of another (an object "a"
//     beside "a/b", which some S3 servers cannot list).
package writefencetest
