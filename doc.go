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
// writers (see EpochSource). Fence.Push admits a push only if its epoch is
// strictly greater than the epoch the record already holds, and lands the
// new epoch and the payload together in one ConditionalStore.PutIfVersion,
// conditioned on the version it read:
//
//  1. validate the arguments;
//  2. read the record: absent is epoch 0; a corrupt record (ErrCorrupt) or a
//     record of another wire identity (ErrWire) refuses, without writing;
//  3. refuse unless epoch > recorded epoch (ErrStaleEpoch), without writing;
//  4. write the record conditioned on the version read ("" = create-only);
//  5. on ErrConflict, someone wrote in between: read afresh and go to 2,
//     with bounded, jittered retries that honour the context.
//
// Because the comparison that matters is made by the server against the
// version the writer read, a deposed writer, a zombie retrying the epoch it
// was granted, and two writers handed the same epoch all end the same way:
// at most one push per epoch ever lands, and the recorded epoch only rises.
//
// The store decides, never memory. A Fence remembers the version of the
// record it last wrote and conditions its next push on it without reading
// first (one round trip per push in steady state); if anyone else wrote in
// between, that write conflicts and the fence reads afresh. A remembered
// epoch never admits a push; it refuses one only when the store shows the
// record absent or below it (see "The floor survives the record").
//
// # One write engine
//
// Every write the package makes goes through one engine: the shard records
// (Push; Update, a read-modify-write at a strict epoch; Seal; Settle), the
// settle log, the lease record and the brand claim. It reads the key,
// decides on what it read, and makes one conditional write; on a conflict
// it backs off, reads afresh and decides again, and a write whose reply
// was lost is resolved by the next read. The guards every write needs live
// in it once: the probe verdict, the brand, the retry policy (a jittered
// back-off before every retry, whatever failed; at most Fence.MaxAttempts
// attempts), the classification of errors (a refusal such as ErrCorrupt,
// ErrWire, ErrInvalidArgument, ErrTooLarge, fs.ErrPermission or
// errors.ErrUnsupported is final and wrote nothing; a conflict is retried;
// any other failure is retried and, after a write, leaves the outcome
// unknown until a read resolves it; a cancelled ctx ends the write with an
// error matching ctx.Err()), and the Observer, which sees how each write
// ended (WriteEvent).
//
// # Capabilities and wrappers
//
// A store may offer faster paths than Get and PutIfVersion: PrefixReader,
// PartsPutter, BrandedPutter. The engine, Probe and the conformance kit
// use them only through the helpers GetPrefix, PutParts and PutIfBranded,
// and only when the store declares them as its own (Capable): so the
// methods that are probed and raced are the methods that run, and a
// wrapper that embeds an adapter and overrides Get or PutIfVersion (a
// freeze, a quota, an audit log) is never bypassed: it inherits the
// adapter's Capabilities, which names the adapter, and is used through its
// own two methods. The package's adapters declare their capabilities.
// A blob store's are found the same way, each with its helper:
// ConsistentBlobLister (StatBlobs, which a Commit checks its new blobs
// with), BlobBatchDeleter (DeleteBlobs, which Collect deletes with) and
// BlobWriter (WriteBlob, which PutBlob writes through). A wrapper that
// overrides a blob method a capability stands for (ListBlobs, DeleteBlob,
// CreateBlob) and declares capabilities itself must give the capability
// the same behaviour, or not declare it.
//
// # Lost replies
//
// A write whose reply was lost may or may not have landed. When Push finds
// the record is exactly its own push (same epoch, writer and payload
// bytes) it reports success, so retrying never turns a writer's own landed
// push into ErrStaleEpoch (a record set back to it, below what the Fence
// saw since, is refused as regressed all the same: see "The floor
// survives the record"). When the outcome cannot be learned at all, Push
// returns an error matching ErrOutcomeUnknown; calling Push again with the
// same arguments resolves it.
//
// # Records and keys
//
// One record per (plugin, shard), at Prefix + "s/" + plugin + "/" + shard
// under the Fence's prefix ("writefence/" by default), the names escaped. A record is a versioned header (format
// version, wire identity, epoch, writer, payload length, a CRC-32C of the
// payload, a CRC-32C over the header) followed by the payload. Writers
// write format version 2 for a plain record, 3 for a stream's (a
// manifest: its blob references and tenure floor, see Commit) and 4 for a
// stream's that carries a collection horizon (see Collect); readers also
// read version 1, whose header held a SHA-256 of the payload instead, and
// refuse any other (an older reader refuses a version it does not know
// the same way: it fails closed). Decoding is strict:
// truncation, trailing bytes, an unknown format version, epoch 0, an empty
// writer or a checksum that disagrees is ErrCorrupt, naming the check. The
// fence fails closed on a corrupt record and never overwrites it; an
// operator replaces it with Fence.Settle, at exactly the version reported
// in the CorruptError (see Settlement).
//
// Keys escape the plugin and shard names so that the mapping is injective
// and no shard key reaches the reserved key space, Prefix + "_" + name,
// where the brand key, lease records, settle logs and the probe's scratch
// keys live.
//
// # Stores
//
// ConditionalStore is the one primitive. The package provides MemStore (in
// memory, for tests and examples) and adapters for S3 through minio-go
// (minioStore), Google Cloud Storage (gcsStore) and
// Valkey or Redis, one server or a cluster (valkeyStore). Package
// writefencetest checks any implementation against the contract, races
// included.
//
// # Errors
//
// Test errors with errors.Is against the sentinels: ErrNotFound,
// ErrConflict, ErrStaleEpoch, ErrEpochRegressed, ErrWire, ErrCorrupt,
// ErrInvalidArgument, ErrTooLarge, ErrOutcomeUnknown, ErrUntrustedStore,
// ErrLeaseHeld, ErrLeaseLost, ErrLeaseExpired, ErrTakeoverTimeout,
// ErrTermEnded, and
// errors.ErrUnsupported for a store the adapter refuses to serve. Every
// typed error matches one of them; read its detail with errors.As:
// StaleEpochError, EpochRegressedError, CorruptError, WireError,
// InvalidArgumentError, OutcomeUnknownError, ProbeError, LeaseHeldError,
// LeaseLostError, and
// StoreError, which every adapter returns for a failed store operation
// ({Op, Key, Err}, as fs.PathError), its Err reaching both
// the sentinel and the client's own error. Messages are stable, lower case
// and prefixed "writefence:"; stored bytes in them are escaped, so a
// hostile value can neither forge a log line nor flood one.
//
// # The wire identity
//
// A program must not write rows that readers of another format cannot
// understand. Two places carry the identity (Fence.Identity,
// "writefence/v1" when empty). Every record holds it, and every write and
// Latest refuses a record of another identity with a *WireError (ErrWire)
// naming the one found. And one reserved key per prefix, the brand key
// (Prefix + "_brand"), holds it, so a foreign program is refused at
// start-up, before it touches any record. A Get of the brand key returns
// the identity's bytes alone; what the store itself holds is the store's
// own layout around them where it has one (a Valkey value, a directory
// store's file: see the package's brand documentation in brand.go), so
// brand a store with Fence.ClaimBrand or the command's "writefence brand
// install", never with the store's own client. The brand is
// configured once, on the Fence: Fence.Brand says when it is checked
// (BrandVerify once, BrandClaim once, claiming an empty store, or
// BrandVerifyAlways, inside every write's own atomic step on a store that
// implements BrandedPutter, as Valkey does); Fence.ClaimBrand brands a
// store (of racing claimers exactly one write lands and all learn the
// winner) and Fence.VerifyBrand only reads. The refusals read
//
//	writefence: wire: expected <identity> but <key> is absent
//	writefence: wire: expected <identity> found <value>
//
// with the found value escaped and cut short. A refusal is final: nothing
// in the package retries it. Any other failure reading the brand (a
// permission error, a key of the wrong type) is returned as such, never as
// a refusal and never as "absent".
//
// # Streams: blobs under a fenced manifest
//
// A shard's state can be many immutable blobs (WAL segments, snapshots of
// any size) and one manifest that lists them. Fence.PutBlob streams a
// reader into a blob of the shard's own blob space, whose name carries the
// writer's epoch, its name and a random id, so no blob key is written
// twice; Fence.Commit writes the manifest (a record that lists the blobs
// it references with their size and CRC-32C) at a strict epoch, only while
// every blob it newly references exists and was written by the committing
// writer within its tenure; Fence.OpenBlob reads only a blob the recorded
// manifest references, checking its bytes; Fence.Collect deletes what no
// manifest can reference: a deposed writer's blobs at once, other
// unreferenced blobs once older than a grace by the store's own clock. The
// blobs may live in another store than the manifests (Fence.Blobs); a
// store holds blobs when it declares BlobStore (MemStore, the directory
// store, S3, GCS; not Valkey). A commit checks its new blobs with
// StatBlobs: one listing of each epoch they were written at where the
// store's listing is consistent (S3, GCS), a StatBlob each otherwise;
// Collect lists the shard's blob space once a pass and deletes in batches
// of 1,000, one request each on S3.
//
// # The floor survives the record
//
// The record is how the store remembers a shard's floor, the epoch below
// which no write lands. Whatever deletes the record or sets it back (a
// lifecycle rule, a time to live, eviction, an operator's delete, a
// restore from backup, a failover to a replica that lacked it) would make
// the shard look new, or older, and a deposed writer's write would land as
// if it were the first. So it is never silent where it can be seen:
//
//   - A Fence remembers, for each record, the highest epoch it wrote or
//     read (Push, Update, Commit, Seal, Settle, Latest, Inspect, Check, a
//     refused write's read), and refuses to write the record, or Collect
//     to delete the shard's blobs, when it finds the record absent or
//     below that epoch: an *EpochRegressedError (ErrEpochRegressed)
//     naming what it saw and what it found; nothing is written, and no
//     retry changes it. A read sent before that epoch was known is never
//     held to it, so a Fence's own writes racing its reads raise no
//     alarm. The memory is bounded as the version cache is (131,072
//     shards; an arbitrary one is dropped past it), and lives as long as
//     the Fence.
//   - A Lease remembers the highest term of its record: it refuses to take
//     a record absent or below it (ErrEpochRegressed), and a renewal that
//     finds the record gone or set back reports the lease lost with a
//     *LeaseLostError that also matches ErrEpochRegressed. A TermSource's
//     first read of a shard in its term is held to what its Fence saw.
//   - Fence.KeepFloor closes the gap a Fence that never saw the shard
//     leaves (a restarted process, another host): each seal and settle
//     enters its epoch in a key of its own, apart from the record, every
//     write reads it, and only a seal or a settle creates a record.
//   - Fence.Check tells a writer, from one read, whether it still holds
//     the shard before it acts outside the store (acknowledges a client,
//     deletes what its manifest dropped): check, then act, within the
//     window between the two; Collect checks so before each batch of
//     deletes.
//
// The way out is always the operator's, never automatic: Settle with
// Settlement.Lost writes a fresh record above the floor the operator
// asserts (the highest epoch ever granted: for the shards of a Lease,
// (its highest term + 1) << 32 - 1), which every Fence then sees;
// Lease.Settle does the same for a lease record; Forget lets one Fence take the record as it
// now is. What stays out of reach: a Fence that never saw the shard,
// without KeepFloor, takes it for new; under KeepFloor a record set back
// within the last tenure (above the last seal) is found only by the
// Fence that wrote or read the later record; and a loss that reaches the
// floor's key too (a restore of the whole store, FLUSHALL) is a loss of
// both. writefence doctor reports the store settings that lose records,
// and writefence policy s3 a bucket policy that refuses an unconditional
// write or delete of one.
//
// # Leases, probes and observation
//
// Lease is an EpochSource for users without a control plane: a lease record
// in a Fence's store, written through the Fence's engine, whose term rises
// on every change of holder; each epoch it hands out is term<<32 | n, so a
// holder pushes many times per term and a new holder's epochs are above
// every epoch of the old one. Fence.Seal lets a new holder raise a shard's
// recorded epoch at once, fencing a zombie before its first data push;
// Lease.Hold takes the lease over, seals the shards within the term it
// took, and renews the lease in the background, with a context that is
// done the moment the lease is lost or expires.
//
// Probe proves on scratch keys that a store really refuses a second
// create-only put and a stale update, through the methods a Fence uses on
// it; Fence.Probe runs it before the first write, for "S3-compatible"
// services that may ignore preconditions.
// Fence.Observer sees every write (SlogObserver logs them); what happened
// is told by the event's error, tested like the error the call returns.
//
// # Promises
//
// Everything the package promises, numbered once; the rest of the
// documentation, the README and the adapters point at these numbers. Each
// holds on a store that honours the ConditionalStore contract (Probe and
// package writefencetest check one), for writers that go through the
// package; what depends on the store or on configuration says so. One
// checker, in the package's tests, checks every one of them on every
// history the tests record: the model test on every store, the
// linearizability test, the end-to-end lease test and a simulation of
// whole deployments on virtual time.
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
// A push reads as little as it can: with the version it remembers it
// reads nothing, and without one it reads the record's head alone (on a
// store that declares a PrefixReader: its first 4 KiB, and of a stream's
// record with more references than fit there, its header and
// references), whatever the record's size. It checks what it read: the
// header's checksum, identity and epoch, the record's size against the
// lengths the header declares, the references against their checksum.
// The payload's checksum it leaves to the store, and what the store
// guarantees depends on where it keeps its version:
//
//   - Stores whose version names their bytes: S3 and Azure ETags, GCS
//     generations and etcd mod revisions (package etcdstore) change with
//     any write, so the bytes cannot change in place, under a version a
//     Fence read or remembers. The Fence's own writes reach them checked
//     (GCS and the directory store compare a CRC-32C before they store,
//     S3 a signature of the body or TLS), and S3, GCS and Azure check
//     their stored bytes themselves. A payload that fails its checksum
//     under a sound header can only be a new version written whole by
//     something outside the package: Latest, Inspect, Update, Commit and
//     Seal, which read the payload, refuse it with ErrCorrupt; a Push over
//     it on S3, GCS or Azure Blob, which read prefixes, does not read the
//     payload and replaces it (promise 7); on etcd, which does not, a Push
//     reads it whole and refuses it. Writers that bypass the package are
//     outside what it can guarantee.
//   - Stores that keep their version beside their bytes
//     (the directory and Valkey stores, whose value can be
//     edited by hand, dynamostore, whose item an UpdateItem can change,
//     and pgstore, whose row an UPDATE can change) check the bytes they
//     hold on every read, GetPrefix included, and refuse a write over
//     damaged ones with ErrCorrupt, naming a version of the damage itself
//     that Settle can replace, and the head of the damaged data, from
//     which the record's header (and its epoch) is still read when it is
//     intact: a damaged payload under an intact header is never
//     overwritten unseen. The directory store reads the whole file to
//     check it (from its disk; a Push gets its head alone).
//     the Valkey store checks a bounded part of a value, its first
//     3900 bytes, its last 100 and its length, so that a read of the head
//     or a write costs the same whatever the size; damage in the middle of
//     a larger value is found by the reads that read it whole (Latest),
//     and a push over it replaces the value (see ConditionalStore).
//   - A store that declares no PrefixReader (MemStore, dynamostore,
//     etcdstore) gives a Push the whole record, which it checks whole and
//     refuses when damaged.
//
// # Failure model
//
// Every write goes through the one engine, so the brand check, the probe
// verdict, the retries and the Observer apply to all of them alike, and
// the promises above hold of every path.
//
// Durability is the store's: a push that returned nil survives what the
// store survives.
//
//   - S3 and GCS acknowledge a write once it is durable; nothing to
//     configure.
//   - The directory store fsyncs the file and its directory before a write
//     returns; a local disk's durability, one host.
//   - MemStore is memory: for tests and demos.
//   - Valkey replicates asynchronously: a primary acknowledges a write and
//     can lose it when a replica is promoted, and a second push at the same
//     epoch can then also land. With a replica and failover (Sentinel, a
//     cluster, or by hand), set StoreOptions.WaitReplicas (and
//     WaitTimeout): a write counts as landed only once that many replicas
//     acknowledged it, else its outcome is unknown (ErrOutcomeUnknown), and
//     a retry does not return nil until the replicas have the record.
//     Without WaitReplicas, only a single Valkey server without failover
//     (with its own persistence) keeps the guarantee.
//   - DynamoDB (package dynamostore) acknowledges a write once it is
//     durable in several Availability Zones; nothing to configure. Its
//     reads are strongly consistent only with ConsistentRead, which the
//     store always asks for; a global table's cross-region replication is
//     not served.
//   - etcd (package etcdstore) acknowledges a write once a Raft majority
//     holds it, so a leader failover never loses it; nothing to configure.
//     A cluster restored from a snapshot must have its revision bumped.
//   - Azure Blob (package azblobstore) acknowledges a write once it is
//     durable in its region; a geo-failover of a GRS account can lose the
//     last writes.
//   - PostgreSQL (package pgstore) is as durable as its commit: across a
//     failover only with synchronous replication to every standby that can
//     be promoted (synchronous_standby_names, synchronous_commit on or
//     remote_apply); asynchronously replicated, a promoted standby can lose
//     acknowledged pushes and issue their versions again.
//
// What it cannot guarantee: anything about a writer that bypasses the
// library and writes the object directly; a store that ignores
// preconditions (run Probe, and writefencetest against your own store).
// Lease expiry uses local clocks; a wrong clock can let a holder
// take over early, but safety never depends on it, because the store checks
// the epoch.
package writefence
