// Package writefence makes a double write by a deposed or confused writer
// impossible, on any storage that has an atomic conditional write.
//
// A replication process ships a shard's state (a WAL segment, a snapshot, a
// manifest) to one mirror record in shared storage. Deciding "am I the
// writer?" from a local view fails under partitions, pauses and restarts:
// an old writer and a new one both push, and the mirror is silently
// corrupted. writefence moves the decision into the storage's own
// conditional write, where it cannot be stale.
//
// # The protocol
//
// Every push carries an epoch, a fencing token handed out by whatever elects
// writers (see EpochSource). Fence.Push admits it only if its epoch is
// strictly greater than the epoch the record holds, and lands the new epoch
// and the payload together in one ConditionalStore.PutIfVersion conditioned
// on the version it read. Because the server makes the comparison, a
// deposed writer, a zombie retrying its epoch and two writers handed one
// epoch all end the same way: at most one write per epoch lands, and the
// recorded epoch only rises. The store decides, never memory: a remembered
// version only saves a read, and a remembered epoch only ever refuses.
//
// Every write of a record, a lease or the brand goes through one engine:
// read, decide, one conditional write, and on a conflict a back-off and a
// fresh read. The guards live there once: the probe verdict (Fence.Probe), the brand
// (Fence.Brand), the retries (Fence.MaxAttempts), the Observer
// (WriteEvent), and the classification of errors: a refusal (ErrCorrupt,
// ErrWire, ErrInvalidArgument, ErrTooLarge, fs.ErrPermission,
// errors.ErrUnsupported...) is final and wrote nothing, any other failure
// is retried, and a cancelled ctx ends the write with an error matching
// ctx.Err(). A store's faster paths are used only where it declares them
// (Capable): the methods probed and raced are the ones that
// run, and a wrapper that overrides Get or PutIfVersion is never bypassed.
//
// # Records and keys
//
// One record per (plugin, shard), at Prefix + "s/" + plugin + "/" + shard,
// the names escaped so that no two shards, and no shard and the reserved
// space Prefix + "_" + name (brand, leases, settle logs, floors, probe,
// blob clock), share a key. A record is a header (format version, wire
// identity, epoch, writer, payload length, a CRC-32C of the payload, one of
// the header) and the payload. Writers write format version 2 for a plain record, 3 for a
// stream's (see Commit) and 4 for a stream's that carries a collection
// horizon (see Collect); readers also read version 1 and refuse any other,
// as older readers do. Truncation, trailing bytes, an unknown version,
// epoch 0, an empty writer or a checksum that disagrees is a *CorruptError
// naming the check, overwritten only by Fence.Settle (promise 7).
//
// # Stores and errors
//
// The package provides MemStore, NewDirConditionalStore,
// NewMinioConditionalStore (S3), NewGCSConditionalStore and
// NewValkeyConditionalStore; dynamostore, etcdstore, azblobstore and
// pgstore provide more; writefencetest checks any.
//
// Test errors with errors.Is against the sentinels: ErrNotFound,
// ErrConflict, ErrStaleEpoch, ErrEpochRegressed, ErrWire, ErrCorrupt,
// ErrInvalidArgument, ErrTooLarge, ErrOutcomeUnknown, ErrUntrustedStore,
// ErrLeaseHeld, ErrLeaseLost, ErrLeaseExpired, ErrTakeoverTimeout,
// ErrTermEnded, and errors.ErrUnsupported for a store an adapter refuses
// to serve. Every typed error matches one, with its detail for errors.As;
// an adapter's failures are *StoreError. Messages are stable, lower case,
// prefixed "writefence:", stored bytes escaped and cut short.
//
// # Identity, streams, leases and the floor
//
// Every record carries its format's wire identity (Fence.Identity), and so
// may the store's brand key, refusing a program of another format before
// it writes (see BrandMode). A refusal is a *WireError, final.
//
// A shard's state can be immutable blobs under one manifest:
// Fence.PutBlob uploads a blob, Fence.Commit writes the manifest,
// Fence.OpenBlob reads only what it references, and Fence.Collect deletes
// what no manifest can come to reference (promises 19 to 26).
//
// Lease, kept in the Fence's store, and TermSource, over a control plane's
// terms, are epoch sources; a new holder seals each shard first
// (Fence.Seal, Lease.Hold), fencing a zombie before its first push.
//
// The floor survives the record: a record deleted or set back (a lifecycle
// rule, a TTL, eviction, a restore) must not let a deposed writer land as
// if first. Fences and Leases refuse it (ErrEpochRegressed), KeepFloor
// keeps the floor apart, and Check tells a writer whether it still holds
// the shard (promises 29 to 32); an operator settles it (Settlement.Lost).
// The README ("When the record is lost or set back") says what stays out
// of reach.
//
// # Promises
//
// Everything the package promises, numbered once; the documentation, the
// README and the adapters cite these numbers. Each holds on a store that
// honours the ConditionalStore contract (Probe and writefencetest check
// one), for writers that go through the package; what depends on the store
// or on configuration says so. One checker in the package's tests checks
// every one on every history the tests record (see the README, "Tests").
//
// Epochs and writes:
//
//  1. The epoch a shard records only rises: every write of its record that
//     lands carries an epoch above the one it replaces, while the store
//     keeps the record (29 to 31 say what happens when it does not);
//     Collect's write of a record's collection horizon changes nothing
//     else in it, its epoch, writer, payload and references included.
//  2. At most one write lands per epoch of a shard while the store keeps
//     the record (a record set back lets an epoch above it land again):
//     of writes handed one epoch, one lands and every other is refused as
//     stale (Collect's horizon write is no write of an epoch).
//  3. A refused write writes nothing: a stale epoch, another identity,
//     damage, an invalid argument, an untrusted store, a held lease or
//     refused credentials leave the store as it was (a Seal or a Settle
//     whose floor's write, 31, is refused says that its record landed).
//  4. A write that returned nil is what the store holds, until a write at
//     a higher epoch replaces it; across the store's own failover as far
//     as the store keeps acknowledged writes (see Durability).
//  5. A call whose reply was lost is resolved by calling it again with the
//     same arguments: nil if it landed, a refusal if another write did (a
//     Settle logged whose record did not land is refused: see Settle). An
//     outcome that cannot be learned is an error matching ErrOutcomeUnknown
//     and the cause that hid it, never also ErrConflict or a refusal.
//  6. A transient failure (network, throttling, a server error) of a read
//     or write a call makes is retried after a back-off, and ends the call
//     only after Fence.MaxAttempts attempts or when ctx ends, but for
//     PutBlob's write of its blob (its reader cannot be read twice) and
//     Collect's listing and deletes of blobs (a caller runs it again),
//     never retried, and Probe's one attempt.
//
// Damage and settles:
//
//  7. A record that does not decode (ErrCorrupt) is never read as absent
//     or as epoch 0, and never overwritten but by a Settle (of a lease's,
//     Lease.Settle) of exactly the version found damaged, except that a
//     Push over a store that reads prefixes replaces a record rewritten
//     whole through the store's writes with a sound head and a payload
//     that fails its checksum (see Damage).
//  8. Settle never lowers the recorded epoch: it lands above the damaged
//     header's epoch when that decodes, above the floor the operator
//     states when it does not, and above every earlier settle of the
//     shard.
//  9. Settle keeps the blobs the damaged record references when its
//     references decode, unless told to drop them (Settlement.DropBlobs),
//     and refuses when they may exist but cannot be read (as far as the
//     Fence's blob store tells: a Fence with none sees no blobs).
//
// Wire identity:
//
//  10. No write lands on a record of another wire identity, and no write
//     of a Fence whose Brand is BrandVerifyAlways lands while the store's
//     brand holds another identity (checked in the write's own atomic step
//     on a store that is a BrandedPutter, right before it elsewhere).
//  11. Of claims racing to brand an empty store, exactly one lands, and
//     every claimer learns the winner's identity.
//
// Leases and epoch sources:
//
//  12. A lease's term only rises, and each term is taken by one Lease
//     value, once, while the store keeps the lease's record (see 30).
//  13. Two Lease values never both hold a lease: another holder, or
//     another value of the same Holder, is refused while the record is
//     neither expired nor released (by the acquirer's clock).
//  14. A Lease hands out strictly rising epochs, every one of a later term
//     above every one of an earlier term, and none once it knows the lease
//     lost or its own clock has passed the expiry.
//  15. Hold returns only once every shard it names is sealed at its term.
//     A takeover whose seal is slow keeps the lease, sealing until the
//     seal lands or the lease is lost: it releases the lease only on a
//     refusal no retry changes.
//  16. A lease that is lost or expires ends its Hold's context and the
//     Deposed contexts of every shard it gates before the call that learns
//     it returns.
//  17. A TermSource hands out strictly rising epochs of its term, continues
//     above what the store records for its writer and term after a
//     restart, and none once its term function reports another term,
//     or a record it reads shows another writer of its term or a later one.
//
// Deposition:
//
//  18. A write of a record by a writer (Push, Update, Commit, Seal) refused
//     as stale cancels the Deposed contexts of that shard on that Fence,
//     with the *StaleEpochError as the cause; a conflict retried, an
//     unknown outcome, a refused Settle, a Check and a Hold's seal passed
//     by an epoch its own Lease handed out (it seals again) cancel none.
//
// Streams:
//
//  19. A blob is written once: no blob key is written twice, none
//     replaced.
//  20. A commit lands only while every blob it newly references exists
//     with the size referenced (but see 24), was written by the committer
//     within its tenure, and was created at or after the collection
//     horizon; one refused as not found had a new blob missing,
//     or under the horizon, during the call.
//  21. A tenure begins at every seal and settle, at its epoch, and at every
//     change of writer: no blob written at an epoch below a seal's is ever
//     newly referenced after it, even by a writer of the same name (a
//     previous incarnation, an earlier lease term).
//  22. Push, Update, Commit and Seal keep the collection horizon, Push,
//     Update and Seal the references (only Commit changes them; Settle as
//     9 says), and Seal the payload (empty over no record).
//  23. A reader sees only admitted bytes: Latest returns a record that
//     decodes and was recorded during the call (ErrNotFound: none was),
//     and OpenBlob only the bytes of a blob the recorded manifest
//     referenced during the call, checked against the reference.
//  24. No referenced blob is ever missing: whatever the pauses of writers
//     and collectors, every blob a recorded manifest references exists,
//     unless something outside the package deleted it, set the record
//     back to bytes it held before on S3 (see the README), or deleted it
//     while a commit that creates it was on its way (31 closes that).
//  25. Collect deletes only what no manifest references or can come to
//     reference, and nothing (but its clock's blob) on a dry run or when
//     the record is corrupt, of another identity, or absent (but for a
//     shard retired, GCOptions.RecordGone).
//  26. Collect reclaims: after a pass, no unreferenced blob is left that
//     can never be committed (a deposed writer's, one below the tenure
//     floor or behind the collection horizon, any of a shard retired
//     with RecordGone).
//
// Observation and keys:
//
//  27. The Observer sees every write once when it ends, and each lost race
//     retried before that, under an Op WriteEvent names (Collect's
//     deletes and clock blob under its one "collect").
//  28. Keys never overlap: a call on one shard writes only that shard's
//     record, its blobs and keys of the reserved space of its Fence's
//     prefix (and, on Valkey, the store's own keys of the default prefix's
//     reserved space, for its replication waits and staged values), and
//     no valid prefix reaches into another's keys.
//
// The floor survives the record:
//
//  29. A Fence that wrote or read a shard's record at an epoch refuses
//     with ErrEpochRegressed (as stale if the write's epoch is not above
//     the record's), writing nothing, every write of it (and Collect's
//     deletes) while it finds the record absent or below that epoch, until
//     an operator settles it above (Settlement.Lost) or the Fence forgets
//     the shard (Forget); it rests on the Fence's memory (131,072 shards),
//     blind to a shard it never saw (see 31).
//  30. A Lease value that held or read its record at a term never takes
//     or writes that record while it finds it absent or at a lower term
//     (ErrEpochRegressed; a renewal reports the lease lost and
//     regressed), and a TermSource whose Fence saw a shard at an epoch
//     hands out no epoch of it from a record absent or below that epoch.
//  31. Under Fence.KeepFloor a shard's floor, the epoch of its last seal
//     or settle kept in a key of its own, survives the record: a write
//     whose call begins once the floor is kept lands only on a record at
//     or above it (a settle only above it; and Collect, there or with
//     RecordGone, deletes nothing below it), and only a seal or a settle
//     creates a record: deleting or setting back the record lets no write
//     land below the floor while the store keeps the floor.
//  32. Check writes nothing, and returns nil only if, at its read, the
//     record held the writer at that epoch (of a stream's record, in the
//     tenure that reached it), else ErrStaleEpoch naming the recorded
//     epoch and writer, ErrEpochRegressed (the record absent, or below
//     that epoch or one its Fence saw), ErrCorrupt or ErrWire; Collect
//     reads so before each batch of deletes and deletes no more once the
//     record no longer holds the tenure it judged by.
//  33. Latest, Inspect, OpenBlob, Forget, VerifyBrand and InspectLease
//     write nothing; VerifyBrand's answer (nil or a *WireError) and
//     InspectLease's record are what the key held at a moment of the call.
//
// # Damage
//
// A Push reads as little as it can (see Push) and leaves the payload's
// checksum to the store. A store whose version names its bytes (S3, GCS,
// Azure Blob, etcd) cannot change them in place, so a payload that fails
// its checksum under a sound header was written whole from outside: every
// read of the payload refuses it, and a Push replaces it where the store
// reads prefixes (promise 7), as on any store a record so written through
// its writes. A store that keeps its version beside its bytes checks them
// on every read and refuses a write over damage, as ConditionalStore
// requires: the README's "Damage: what each store checks".
//
// # Durability
//
// A write that returned nil survives what its store survives (promise 4):
// Valkey keeps it across a failover only with StoreOptions.WaitReplicas,
// PostgreSQL only with synchronous replication. The README ("What each
// store guarantees") says what each store keeps and what to configure, and
// what no store gives: a writer that bypasses the package, or a store that
// ignores preconditions, is outside every promise.
package writefence
