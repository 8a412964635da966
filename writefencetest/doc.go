// Package writefencetest checks implementations of
// writefence.ConditionalStore and writefence.EpochSource against the
// contracts the fence relies on.
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
// TestEpochSource checks an implementation of writefence.EpochSource the
// same way, from a constructor of elections: that a leader's epochs rise,
// that a later leader's are above every earlier one's, and that a deposed
// leader draws none (see there).
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
// tools find them. writefence.BlobStore is used only when the store
// declares it as its own (writefence.Capable), the rule by which a Fence
// keeps blobs on a store; a store that does not has no blobs as far as a
// Fence is concerned, and the blob checks are skipped, saying why.
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
//     loaded 2-core machine. Options.OverwriteReads sets a smaller count for
//     a second configuration of a store already checked in full.
//   - Get/TooLarge: at the store's size limit, an object of exactly the
//     limit is read whole by Get and GetPrefix; one byte more is refused
//     by both with a *writefence.StoreError naming the key that matches
//     writefence.ErrTooLarge. Refusing either object at write time with
//     ErrInvalidArgument or ErrTooLarge, writing nothing, also passes.
//     The limit is Options.ReadLimit, or, without it, learned: if the
//     store refuses Payload/1MiB's object with ErrTooLarge (at write or at
//     read), a binary search of objects from 4 KiB up finds the largest
//     one the store writes and reads, every refusal met on the way
//     checked as above. A store that holds 1 MiB and was given no limit
//     skips the check.
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
//     matching the sentinel, as fs.PathError is for a path. Beyond these
//     two, every error the suite gets from a store method and looks at
//     (a refused precondition, a malformed token, a missing key, an
//     object over the read limit, damage) must reach a
//     *writefence.StoreError with errors.As, in whichever subtest it
//     comes; only a done context's own error and the *writefence.WireError
//     of a brand's refusal pass as they are.
//   - GetPrefix/MatchesGet, GetPrefix/Missing: GetPrefix returns the leading
//     bytes, the size and the version a Get returns, for n smaller than the
//     object, equal to it and larger, right after each write (a version
//     that lags a write fails); a missing or deleted key is ErrNotFound.
//   - GetPrefix/Sizes, GetPrefix/Token: for n of 1 and of a record's
//     largest header, objects of 0 and 1 bytes and of n-1, n, n+1 and
//     3n+7 bytes (up to the store's size limit) give GetPrefix the leading
//     bytes, the whole object's size and Get's version; the version
//     GetPrefix returns conditions a write as Get's does: a write on it
//     lands, a second one on it matches ErrConflict.
//   - Delete/Missing (with a Deleter): deleting a key never written, or one
//     deleted already, returns nil and leaves it missing: two tools may
//     delete one key at once.
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
//     64 KiB value (or the store's size limit, when less), beyond the
//     bounded part a store may check on its writes (see
//     writefence.ConditionalStore): Get reports it as above, and so does
//     GetPrefix of the whole value; GetPrefix of fewer bytes reports it
//     too, or returns the version from before the damage with the leading
//     bytes as they are; a write conditioned on that version is refused as
//     over any damage, or lands and replaces the value whole; a write
//     conditioned on the version Get reported lands.
//   - Settle/AboveDamage, Settle/RepeatDamage (with Options.Damage):
//     through a writefence.Fence, a record at epoch 100 whose last payload
//     byte is damaged still shows its epoch to Inspect (so a store's
//     *writefence.CorruptError must carry the damaged bytes' Head); a
//     settle at 5 is refused as stale and a deposed writer's push at 50
//     meets the damage, neither writing anything, settle log included; a
//     settle at 101 lands, after which the push at 50 is stale. A record
//     emptied, settled at 10, pushed to 20 and emptied again cannot be
//     settled again by the first settle: the settle log refuses it as
//     stale where the second damage has the first's version, the store's
//     version refuses it where not, and the damage stands.
//   - Lister/Prefix, Lister/Stop, Lister/Canceled (with a Lister): every key
//     written under a prefix, at any depth, is listed exactly once, none
//     outside it, and a deleted key is not; List stops at fn's first error
//     and returns it; a context cancelled before the listing, or by fn
//     during it, makes List return an error matching context.Canceled.
//   - Blobs/RoundTrip (with a BlobStore, for this and every Blobs check):
//     blobs of 0 bytes, 1 byte, a part less a byte, a part, two parts and
//     a byte (Options.BlobPartSize, 5 MiB by default) and two parts past
//     the first 5 MiB (which a store may read before it chooses one
//     request or an upload in parts), streamed from a reader that yields
//     chunks of 1 to 4,096 bytes, the last one together with io.EOF, are
//     read to io.EOF by CreateBlob and read back by OpenBlob byte for
//     byte; CreateBlob,
//     StatBlob and OpenBlob give the key, the size written and a time that
//     is not zero, and agree on them (times within a second: S3's
//     Last-Modified has one-second resolution).
//   - Blobs/CreateOnly: a second CreateBlob of an existing key, with
//     shorter bytes, is refused with a *writefence.StoreError matching
//     ErrConflict that leaves the first blob as it was (bytes, size and
//     time); or, on a store that cannot tell on the call it uses, it
//     returns nil and the key holds the second blob whole, which the check
//     logs (see Create-only below). Any other error fails, and the key
//     never holds a mix of the two.
//   - Blobs/FailingReader: a reader that fails at its first read, midway
//     through a small blob, or after a part and a byte fails CreateBlob
//     with an error matching the reader's (and neither ErrConflict nor
//     ErrNotFound), and leaves no blob at the key: StatBlob and OpenBlob
//     match ErrNotFound and ListBlobs does not list it.
//   - Blobs/List: ListBlobs lists every blob under a prefix, at any depth,
//     exactly once, with the size and the time StatBlob gives (a zero time
//     fails: Collect would take the blob for ancient), none outside the
//     prefix and not one deleted before the listing; it stops at fn's first
//     error and returns it; a context cancelled before the listing, or by
//     fn during it, makes it return an error matching context.Canceled.
//   - Blobs/Missing: StatBlob and OpenBlob of a key never created return a
//     *writefence.StoreError naming the key that matches ErrNotFound and
//     not ErrConflict; DeleteBlob of it returns nil (two Collects may
//     delete one blob at once).
//   - Blobs/Delete: after DeleteBlob, StatBlob and OpenBlob of the key
//     match ErrNotFound.
//   - Blobs/Clock: blobs created one after the other: the time CreateBlob
//     returns for each is not before that of an earlier one, as StatBlob
//     and ListBlobs give it, by more than a second. Collect compares
//     exactly these (a fresh blob's time against each listed blob's), so
//     the store's clock must not go back between blobs.
//   - Blobs/Fence: through a writefence.Fence on the store, PutBlob streams
//     a blob, Commit references it in the manifest, and OpenBlob reads it
//     back checked against its reference; a blob the manifest does not
//     reference is ErrNotFound through OpenBlob, though StatBlob finds it.
//     The writer's name holds a space, so the blob's key holds an escape
//     ("%20"), as a Fence's keys may; no other check uses such a key.
//   - Blobs/ListConsistent (when the store declares
//     writefence.ConsistentBlobLister): for several rounds, blobs created
//     and then some of them deleted, each listing made right after the
//     calls returned: ListBlobsConsistent lists every blob that exists
//     exactly once, with the size and a time that agree with StatBlob's,
//     no deleted blob and nothing outside the prefix, and from after a
//     key only the keys that sort after it; fn's error stops it,
//     a cancelled context stops it with the context's error. A Commit
//     trusts what it lists: a deleted blob listed would let a commit
//     reference it. Of 1,001 blobs under one prefix (past a page of S3's
//     and GCS's listings; a commit lists up to 2,000), it and ListBlobs
//     list each once, and it lists those after the 334th, across pages.
//   - Blobs/StatBlobs: writefence.StatBlobs, which a Commit checks its new
//     blobs with, returns exactly the keys that exist, over a prefix that
//     holds several (listed, on a store that declares
//     writefence.ConsistentBlobLister) and one that holds one, each with
//     StatBlob's size and time, and leaves out a deleted key and one never
//     created; the log says which path it took.
//   - Blobs/DeleteBlobs: writefence.DeleteBlobs, which Collect deletes
//     with (through the store's writefence.BlobBatchDeleter when it
//     declares one), removes the keys it is given, a missing one
//     included, returns them, and stops at a cancelled context; the log
//     says which path it took. A store that batches deletes 1,001 in one
//     call (Collect passes up to 10,000): each returned once, none left.
//   - Blobs/WriteBlob: writefence.WriteBlob, which PutBlob writes through
//     (through the store's writefence.BlobWriter when it declares one),
//     reads its reader to the end and returns the size the store holds,
//     for an empty blob, one byte and two parts and a byte, as StatBlob
//     and OpenBlob see it; a second write of a key is refused with
//     writefence.ErrConflict or replaces the blob whole; a reader's failure
//     is returned and leaves no blob. The log says which path it took.
//   - Blobs/Canceled: CreateBlob under a cancelled context fails with an
//     error matching context.Canceled and leaves no blob.
//   - Blobs/Collect: writefence.Fence.Collect on the store deletes a
//     deposed writer's blobs at once, whatever the grace; keeps a blob of
//     the current tenure while it is younger than the grace (2 s) by the
//     store's own clock, and deletes it once older, which a poll of that
//     clock waits for (30 s at most); and never deletes a referenced blob
//     until a commit replaces the references.
//   - Floor/Deleted (with a Deleter), Floor/SetBack, Floor/Kept,
//     Floor/Check: through writefence.Fences on the store, a record that
//     something outside the package deletes, or sets back to an earlier
//     version's bytes with a conditional write (a restore from backup), is
//     refused as writefence.ErrEpochRegressed by a Fence that wrote or read
//     it before, writing nothing, and under Fence.KeepFloor by a Fence
//     that never saw it; Settle with Settlement.Lost writes it afresh,
//     Fence.Forget lets one Fence carry on; Fence.Check holds a writer to
//     its tenure before and after a takeover. The store's part is that a
//     delete and a write of old bytes leave it saying so: a version
//     token that never names two contents, a delete that is a delete.
//   - Payload/Empty, Payload/AllBytes, Payload/1MiB: empty, binary (all 256
//     byte values) and 1 MiB payloads round-trip; where the store's size
//     limit (Options.ReadLimit, or learned) is less, an object of exactly
//     the limit does.
//   - Aliasing/Put, Aliasing/Get: the store keeps no reference to the
//     caller's slices, in either direction.
//   - Canceled/Get, Canceled/Put: a cancelled context makes Get, GetPrefix
//     and every write fail with an error matching context.Canceled, and the
//     cancelled write writes nothing.
//   - Fence/Reads (with Options.Wire, on a store that declares
//     writefence.PrefixReader): over a record of 1 MiB (or the size limit,
//     less two headers), a fresh Fence's push reads the head of the
//     record it replaces, never its payload, and writes; a fresh Fence's
//     stale push reads a header alone, in one round trip; the Fence that wrote last pushes with the
//     write alone, reading nothing.
//   - Fence/Overrides (with Options.Wrap): a store that embeds the store
//     under test and overrides Get and PutIfVersion is used through its
//     overrides by every write of a Fence (Push, Update, Seal, Settle,
//     Lease.Acquire, ClaimBrand) and every read, never through the
//     capabilities it inherits: with the override refusing, every attempt
//     the engine makes reaches it and nothing is written, with no brand
//     check and with writefence.BrandVerifyAlways.
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
//   - Race/CreateBlob (with a BlobStore): 16 goroutines create one new blob
//     key at once, each with bytes of its own and of its own length, 20
//     rounds, and one more create of the key, with shorter bytes, follows
//     each race. A store that refuses any of these creates with ErrConflict
//     must let exactly one racer land, refuse the follow-up, and hold the
//     winner's bytes; a store that refuses none must hold exactly one
//     racer's bytes, whole, after the race, and the follow-up's after it.
//
// A check whose optional interface or option is missing is skipped, saying
// why.
//
// # Create-only, for blobs
//
// writefence.BlobStore asks a store to refuse a CreateBlob of an existing
// key with ErrConflict where it can tell on the call it uses, and lets a
// store that cannot (an S3 server without If-None-Match) write anyway: no
// key a Fence creates is ever created twice, because each holds an id of
// the time it was put and 80 random bits. The suite therefore takes a
// store at its word:
//
//   - a store that refuses a create of an existing key with ErrConflict
//     says it can tell, and must then leave the blob as it was and refuse
//     every such create, racing ones included. A store that looks for the
//     key first (a HEAD, then an unconditional PUT) refuses a second
//     create but lets racing creates land, and fails Race/CreateBlob;
//   - a store that refuses none replaces the blob whole at every create.
//     It passes, and the suite logs that its create-only is not decided by
//     the store: the uniqueness of blob keys is then the Fence's alone;
//   - on either, a create that returns nil must have stored exactly its
//     bytes, and the key never holds a mix of two creates (the tail of a
//     longer blob under a shorter one written over it in place).
//
// Each subtest calls newStore afresh and uses keys under a random prefix of
// its own, so newStore may return the same store, over one shared bucket or
// database, every time. When the store also implements writefence.Deleter,
// each subtest deletes the keys it used when it ends; otherwise they are
// left behind under the prefix "writefencetest/". Blobs are always
// deleted (DeleteBlob is part of BlobStore): the ones the subtest named
// and every one ListBlobs lists under its prefix, the Fence's included.
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
// Race/CreateBlob releases its racers from one barrier, and the create
// that follows each race tells whether the store refuses an existing key
// whatever the order in which the racers landed.
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
//     change a store's bytes behind its back; and a size limit above
//     1 MiB, without Options.ReadLimit, which the suite does not write
//     objects large enough to find.
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
//   - That a blob is durable when CreateBlob returns: no check fails the
//     server, as for records.
//   - The memory bound of CreateBlob: that a store holds no more than a
//     part of a blob at once. The suite's readers generate their bytes, so
//     a store that buffers a whole blob passes. To measure it, create a
//     blob of many parts (say 1 GiB) from such a reader in a program of
//     your own and watch the live heap while it streams: sample
//     runtime/metrics' /gc/heap/live:bytes from another goroutine, or run
//     with GODEBUG=gctrace=1 and read the heap sizes at each collection.
//     The peak should be about a part (times the uploads in flight), not
//     the blob's size. Blobs/RoundTrip and Blobs/FailingReader run the
//     multipart path only if Options.BlobPartSize is the store's part
//     size (5 MiB when unset).
//   - The store's clock against real time. Blobs/Clock sees that the clock
//     does not go back between blobs, and Blobs/RoundTrip that CreateBlob
//     and StatBlob give one time; neither sees a clock that runs slow or
//     fast. A store whose CreateBlob returns the client's time while the
//     server dates the blob passes wherever the two clocks agree to within
//     a second, as they may on the machine the suite runs on and not on
//     another. Collect's grace is only as good as the store's clock.
//   - Whether a store that replaces an existing blob could have refused
//     it: such a store is safe under a Fence only because every key a
//     Fence creates is fresh (see Create-only, for blobs). A store used
//     outside a Fence, with keys of its caller's choosing, gets no such
//     guarantee from the suite.
//   - A CreateBlob cancelled, or failed by the network, midway: the suite
//     fails only the reader. A store must abort its upload then too, and
//     leave no blob, which no check sees.
package writefencetest
