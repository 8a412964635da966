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
// on the version it read; on a conflict it reads afresh and decides again
// (Push lists the steps). Because the server makes the comparison that
// matters, a deposed writer, a zombie retrying the epoch it was granted and
// two writers handed the same epoch all end the same way: at most one write
// per epoch lands, and the recorded epoch only rises (promises 1 and 2).
//
// The store decides, never memory. A Fence conditions its next write on the
// version of the record it last wrote, without reading first (one round
// trip per push in steady state); a write by anyone else in between makes
// it conflict and read afresh. A remembered epoch never admits a write; it
// refuses one only when the store shows the record absent or below it (see
// "The floor survives the record").
//
// # One write engine
//
// Every write the package makes goes through one engine: the shard records
// (Push; Update, a read-modify-write at a strict epoch; Commit; Seal;
// Settle), the settle log, the floor, the lease record and the brand claim.
// It reads the key, decides on what it read and makes one conditional write;
// on a conflict it backs off, reads afresh and decides again. The guards
// every write needs live in it once: the probe verdict (Fence.Probe), the
// brand (Fence.Brand), the retry policy (a jittered back-off before every
// retry, whatever failed; at most Fence.MaxAttempts attempts), the
// classification of errors (a refusal such as ErrCorrupt, ErrWire,
// ErrInvalidArgument, ErrTooLarge, fs.ErrPermission or errors.ErrUnsupported
// is final and wrote nothing; any other failure is retried and, after a
// write, leaves the outcome unknown until a read resolves it, promise 5; a
// cancelled ctx ends the write with an error matching ctx.Err()), and the
// Observer (WriteEvent).
//
// A store's faster paths (PrefixReader, PartsPutter, BrandedPutter, and a
// BlobStore's ConsistentBlobLister, BlobBatchDeleter and BlobWriter) are used
// only through one helper each (GetPrefix, PutParts, PutIfBranded, StatBlobs,
// DeleteBlobs, WriteBlob), and only when the store declares them as its own
// (Capable). So the methods that are probed and raced are the methods that
// run, and a wrapper that overrides Get or PutIfVersion is never bypassed.
//
// # Records and keys
//
// One record per (plugin, shard), at Prefix + "s/" + plugin + "/" + shard
// (Fence.Prefix), the names escaped so that the mapping is injective and no
// shard key reaches the reserved key space, Prefix + "_" + name, where the
// brand key, lease records, settle logs, floors and the probe's scratch keys
// live. A record is a versioned header (format version, wire identity,
// epoch, writer, payload length, a CRC-32C of the payload, a CRC-32C over
// the header) followed by the payload. Writers write format version 2 for a
// plain record, 3 for a stream's (a manifest: its blob references and tenure
// floor, see Commit) and 4 for a stream's that carries a collection horizon
// (see Collect); readers also read version 1, whose header held a SHA-256 of
// the payload instead, and refuse any other, as an older reader refuses a
// version it does not know: they fail closed. Decoding is strict:
// truncation, trailing bytes, an unknown format version, epoch 0, an empty
// writer or a checksum that disagrees is a *CorruptError (ErrCorrupt) naming
// the check. A corrupt record is never overwritten but by Fence.Settle, at
// exactly the version the error reports.
//
// # Stores
//
// ConditionalStore is the one primitive. The package provides MemStore (in
// memory, for tests and examples), NewDirConditionalStore (a local
// directory), NewMinioConditionalStore (S3), NewGCSConditionalStore (Google
// Cloud Storage) and NewValkeyConditionalStore (Valkey or Redis, a server or
// a cluster); packages dynamostore, etcdstore, azblobstore and pgstore
// provide more. Package writefencetest checks any implementation against the
// contract, races included.
//
// # Errors
//
// Test errors with errors.Is against the sentinels: ErrNotFound,
// ErrConflict, ErrStaleEpoch, ErrEpochRegressed, ErrWire, ErrCorrupt,
// ErrInvalidArgument, ErrTooLarge, ErrOutcomeUnknown, ErrUntrustedStore,
// ErrLeaseHeld, ErrLeaseLost, ErrLeaseExpired, ErrTakeoverTimeout,
// ErrTermEnded, and errors.ErrUnsupported for a store the adapter refuses
// to serve. Every
// typed error matches one of them; read its detail with errors.As:
// StaleEpochError, EpochRegressedError, CorruptError, WireError,
// InvalidArgumentError, OutcomeUnknownError, ProbeError, LeaseHeldError,
// LeaseLostError, and StoreError, which every adapter returns for a failed
// store operation ({Op, Key, Err}, as fs.PathError). Messages are stable,
// lower case and prefixed "writefence:"; stored bytes in them are escaped,
// so a hostile value can neither forge a log line nor flood one.
//
// # The wire identity
//
// A program must not write rows that readers of another format cannot
// understand. Two places carry the identity (Fence.Identity): every record,
// so that every write and Latest refuse a record of another identity, and
// one reserved key per prefix, the brand key (Prefix + "_brand"), so that a
// program of another format is refused at start-up, before it touches any
// record. Fence.Brand says when the brand is checked (see BrandMode);
// Fence.ClaimBrand brands a store and Fence.VerifyBrand only reads it. Brand
// a store through them or the command's "writefence brand install", never
// with the store's own client: a store may keep its own layout around the
// identity's bytes (a Valkey value, a directory store's file). A refusal is
// a *WireError (ErrWire) and final: nothing in the package retries it. Any
// other failure reading the brand (a permission error, a key of the wrong
// type) is returned as such, never as a refusal and never as "absent".
//
// # Streams: blobs under a fenced manifest
//
// A shard's state can be many immutable blobs (WAL segments, snapshots of
// any size) and one manifest that lists them. Fence.PutBlob streams a reader
// into a new blob of the shard's own blob space, at a key never written
// twice; Fence.Commit writes the manifest, a record that references its
// blobs, at a strict epoch, only while every blob it newly references exists
// and was written by the committing writer within its tenure; Fence.OpenBlob
// reads only a blob the recorded manifest references, checking its bytes;
// Fence.Collect deletes what no manifest can reference. The blobs may live
// in another store than the manifests (Fence.Blobs); a store holds blobs
// when it declares BlobStore (MemStore, the directory store, S3, GCS; not
// Valkey).
//
// # The floor survives the record
//
// The record is how the store remembers a shard's floor, the epoch below
// which no write lands. Whatever deletes the record or sets it back (a
// lifecycle rule, a time to live, eviction, an operator's delete, a restore
// from backup, a failover to a replica that lacked it) would let a deposed
// writer's write land as if it were the first. A Fence and a Lease remember
// what they saw and refuse such a record with ErrEpochRegressed (promises 29
// and 30); Fence.KeepFloor keeps the floor in a key of its own, for a Fence
// that never saw the shard (promise 31); Fence.Check tells a writer whether
// it still holds the shard before it acts outside the store (promise 32).
// The way out is always an operator's, never automatic: Settle with
// Settlement.Lost, Lease.Settle, or Forget. A loss that reaches the floor's
// key too (a restore of the whole store) is out of reach; the README ("When
// the record is lost or set back") says what else is, and
// "writefence doctor" reports the store settings that lose records.
//
// # Leases, probes and observation
//
// Lease is an EpochSource for users without a control plane, kept in a
// record of the Fence's store; Lease.Hold takes it over, seals the shards
// within the term it took (Fence.Seal: a new holder fences a zombie before
// its first data push) and renews it in the background. TermSource turns a
// control plane's term into epochs. Probe proves that a store refuses what
// its preconditions should, through the methods a Fence uses; Fence.Probe
// runs it before the first write, for "S3-compatible" services that may
// ignore preconditions. Fence.Observer sees every write (see WriteEvent;
// SlogObserver logs them).
//
// # Promises
//
// Everything the package promises, numbered once; the rest of the
// documentation, the README and the adapters point at these numbers. Each
// holds on a store that honours the ConditionalStore contract (Probe and
// package writefencetest check one), for writers that go through the
// package; what depends on the store or on configuration says so. One
// checker, in the package's tests, checks every one of them on every
// history the tests record (see the README, "Tests").
//
// Epochs and writes:
//
//  1. The epoch a shard records only rises: every write of its record that
//     lands carries an epoch above the one it replaces, while the store
//     keeps the record (29 to 31 say what happens when it does not).
//     (Collect's write of a record's collection horizon keeps its epoch,
//     writer, payload and references as they are, and changes nothing
//     else.)
//  2. At most one write lands per epoch of a shard: of writes handed one
//     epoch, one lands and every other is refused as stale (Collect's
//     horizon write is no write of an epoch).
//  3. A refused write writes nothing: a stale epoch, another identity,
//     damage, an invalid argument, an untrusted store, a held lease or
//     refused credentials leave the store as it was.
//  4. A write that returned nil is what the store holds, until a write at
//     a higher epoch replaces it; across the store's own failover as far
//     as the store keeps acknowledged writes (see Durability).
//  5. A call whose reply was lost is resolved by calling it again with the
//     same arguments: nil if it landed, a refusal if another write did.
//     When the outcome cannot be learned the error matches
//     ErrOutcomeUnknown and the cause that hid it, and never also
//     ErrConflict or a refusal.
//  6. A transient failure (a network error, throttling, a server error) of
//     a read or write that a write of a record or a lease makes (its read,
//     its conditional write, a commit's checks of its blobs, the brand's
//     read), or of the read of Latest, Inspect or OpenBlob, is retried
//     after a back-off; it ends the call only after Fence.MaxAttempts
//     attempts, or when ctx ends. (PutBlob, which streams a reader it
//     cannot read twice, and Collect, which a caller runs again, are not
//     retried.)
//
// Damage and settles:
//
//  7. A record that does not decode (ErrCorrupt) is never read as absent
//     or as epoch 0, and never overwritten but by a Settle of exactly the
//     version found damaged; except that on a store whose versions name
//     its bytes, a Push over a record rewritten whole from outside with a
//     sound head and a payload that fails its checksum replaces it (see
//     Damage).
//  8. Settle never lowers the recorded epoch: it lands above the damaged
//     header's epoch when that decodes, above the floor the operator
//     states when it does not, and above every earlier settle of the
//     shard.
//  9. Settle keeps the blobs the damaged record references when its
//     references decode, unless told to drop them
//     (Settlement.DropBlobs), and refuses when they may exist but cannot
//     be read (as far as the Fence's blob store tells: a Fence with none
//     sees no blobs).
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
//     value, once.
//  13. Two Lease values never both hold a lease: another holder, or
//     another value of the same Holder, is refused while the record is
//     neither expired nor released (by the acquirer's clock).
//  14. A Lease hands out strictly rising epochs, every one of a later term
//     above every one of an earlier term, and none once it knows the lease
//     lost or its own clock has passed the expiry.
//  15. Hold returns only once every shard it names is sealed at its term.
//     A takeover whose seal is slow keeps the lease and keeps sealing
//     until the seal lands or the lease is lost: it releases the lease
//     only on a refusal no retry changes.
//  16. A lease that is lost or expires ends its Hold's context and the
//     Deposed contexts of every shard it gates, by the time the call that
//     learns it returns.
//  17. A TermSource hands out strictly rising epochs of its term, continues
//     above what the store records for its writer and term after a
//     restart, and none once its term function reports another term.
//
// Deposition:
//
//  18. A write of a record by a writer (Push, Update, Commit, Seal) that
//     the store refuses as stale cancels the Deposed contexts of that
//     shard on that Fence, with the *StaleEpochError as the cause; a
//     conflict retried, an unknown outcome and a refused Settle cancel
//     none.
//
// Streams:
//
//  19. A blob is written once: no blob key is ever written twice, so no
//     blob is replaced.
//  20. A commit lands only while every blob it newly references exists
//     with the size referenced, was written by the committing writer
//     within its tenure, and was created at or after the record's
//     collection horizon.
//  21. A tenure begins at every seal and settle, at its epoch, and at every
//     change of writer: no blob written at an epoch below a seal's is ever
//     newly referenced after it, even by a writer of the same name (a
//     previous incarnation, an earlier lease term).
//  22. Push, Update and Seal keep the references of the record they
//     replace; only Commit changes them, and Settle keeps them as 9 says.
//  23. A reader sees only admitted bytes: Latest returns a record that
//     decodes and was recorded during the call, and OpenBlob only the
//     bytes of a blob the recorded manifest referenced during the call,
//     checked against the reference.
//  24. No referenced blob is ever missing: whatever the pauses of writers
//     and collectors, every blob a recorded manifest references exists,
//     unless something outside the package deleted it.
//  25. Collect deletes only what no manifest references or can come to
//     reference, and deletes nothing when the record is corrupt, of
//     another identity, or absent (unless told the shard is retired,
//     GCOptions.RecordGone).
//  26. Collect reclaims: after a pass, no unreferenced blob is left that
//     can never be committed (a deposed writer's, one below the tenure
//     floor or behind the collection horizon).
//
// Observation and keys:
//
//  27. The Observer sees every write once when it ends, and each lost race
//     retried before that, under an Op WriteEvent names.
//  28. Keys never overlap: a call on one shard writes only that shard's
//     record, its blobs and keys of the reserved space of its Fence's
//     prefix (and, on Valkey, the store's own keys of the default prefix's
//     reserved space, for its replication waits and staged values), and
//     no valid prefix reaches into another's keys.
//
// The floor survives the record:
//
//  29. A Fence that wrote or read a shard's record at an epoch refuses
//     with ErrEpochRegressed, writing nothing, every write of it (and
//     Collect's deletes) while it finds the record absent or below that
//     epoch, until an operator settles it above (Settlement.Lost) or the
//     Fence forgets the shard (Forget); it rests on the Fence's memory of
//     up to 131,072 shards, and a Fence that never saw the shard cannot
//     know (31 closes that).
//  30. A Lease value that held or read its record at a term never takes
//     or writes that record while it finds it absent or at a lower term
//     (ErrEpochRegressed; a renewal reports the lease lost and
//     regressed), and a TermSource whose Fence saw a shard at an epoch
//     hands out no epoch of it from a record absent or below that epoch.
//  31. Under Fence.KeepFloor a shard's floor, the epoch of its last seal
//     or settle kept in a key of its own, survives the record: a write
//     whose call begins once the floor is kept lands only on a record at
//     or above it (a settle only above it), and only a seal or a settle
//     creates a record, so deleting the record or setting it back never
//     lets a write land below the floor, as far as the store keeps the
//     floor's key.
//  32. Check returns nil only if, at its read, the record held the writer
//     at that epoch (of a stream's record, in the tenure that reached
//     it), and otherwise the refusal a write would meet (ErrStaleEpoch
//     naming the recorded epoch and writer, ErrEpochRegressed, ErrCorrupt,
//     ErrWire); Collect makes that read before each batch of deletes and
//     deletes nothing more once the record no longer holds the tenure it
//     judged by.
//
// # Damage
//
// A Push reads as little as it can (see Push) and checks what it read: the
// header's checksum, identity and epoch, the record's size against the
// lengths the header declares, the references against their checksum. The
// payload's checksum it leaves to the store:
//
//   - On a store whose version names its bytes (S3 and Azure ETags, GCS
//     generations, etcd mod revisions), bytes cannot change in place under
//     a version a Fence read, so a payload that fails its checksum under a
//     sound header is a new version written whole from outside the
//     package. Latest, Inspect, Update, Commit and Seal, which read the
//     payload, refuse it with ErrCorrupt; a Push over it replaces it on S3,
//     GCS and Azure Blob, which read prefixes (promise 7), and refuses it on
//     etcd, which does not.
//   - A store that keeps its version beside its bytes (the directory and
//     Valkey stores, dynamostore, pgstore) checks the bytes it holds on
//     every read and refuses a write over damaged ones, as
//     ConditionalStore.PutIfVersion requires; Valkey checks a bounded part
//     of a value on a write and on a read of its head.
//   - A store that declares no PrefixReader (MemStore, dynamostore,
//     etcdstore) gives a Push the whole record, which it checks whole.
//
// The README ("Damage: what each store checks") says how each store does it.
//
// # Durability
//
// A write that returned nil survives what its store survives (promise 4).
// S3, GCS, DynamoDB, etcd and Azure Blob (within its region) acknowledge
// durable writes; the directory store fsyncs before a write returns;
// MemStore is memory. Valkey keeps acknowledged writes across a failover
// only with StoreOptions.WaitReplicas, PostgreSQL only with synchronous
// replication. The README ("What each store guarantees") says what each
// store keeps and what to configure.
//
// Nothing is guaranteed of a writer that bypasses the package, nor over a
// store that ignores preconditions (run Probe, and writefencetest against
// your own store). Lease expiry uses local clocks, but no promise rests on
// them: the store checks the epoch.
package writefence
