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
// epoch never refuses a push on its own.
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
//
// # Lost replies
//
// A write whose reply was lost may or may not have landed. When Push finds
// the record is exactly its own push (same epoch, writer and payload
// bytes) it reports success, so retrying never turns a writer's own landed
// push into ErrStaleEpoch. When the outcome cannot be learned at all, Push
// returns an error matching ErrOutcomeUnknown; calling Push again with the
// same arguments resolves it.
//
// # Records and keys
//
// One record per (plugin, shard), at Prefix + "s/" + plugin + "/" + shard
// under the Fence's prefix ("writefence/" by default), the names escaped. A record is a versioned header (format
// version, wire identity, epoch, writer, payload length, a CRC-32C of the
// payload, a CRC-32C over the header) followed by the payload. Writers
// write format version 2; readers also read version 1, whose header held a
// SHA-256 of the payload instead, and refuse any other (an older reader
// refuses version 2 the same way: it fails closed). Decoding is strict:
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
// (MinioConditionalStore), Google Cloud Storage (GCSConditionalStore) and
// Valkey or Redis, one server or a cluster (ValkeyConditionalStore). Package
// writefencetest checks any implementation against the contract, races
// included.
//
// # Errors
//
// Test errors with errors.Is against the sentinels: ErrNotFound,
// ErrConflict, ErrStaleEpoch, ErrWire, ErrCorrupt, ErrInvalidArgument,
// ErrTooLarge, ErrOutcomeUnknown, ErrUntrustedStore, ErrLeaseHeld,
// ErrLeaseLost, ErrLeaseExpired, ErrTakeoverTimeout, and
// errors.ErrUnsupported for a store the adapter refuses to serve. Every
// typed error matches one of them; read its detail with errors.As:
// StaleEpochError, CorruptError, WireError, InvalidArgumentError,
// OutcomeUnknownError, ProbeError, LeaseHeldError, LeaseLostError, and
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
// store, S3, GCS; not Valkey).
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
// # Failure model
//
// What the fence guarantees, on a store that honours the ConditionalStore
// contract: no two writes land at one epoch of a shard; the epochs that land
// strictly increase; a write refused as stale wrote nothing; a record that
// fails to decode is never overwritten except by Settle at exactly the
// version found corrupt, and Settle never lowers the recorded epoch (above
// the damaged header's epoch when it decodes, also under damage a store
// found in place; above a floor the operator states when no header
// decodes; above every earlier settle of the shard, which its settle log
// keeps, so an old settle run again over the same damaged bytes is
// refused); a write reported as landed is in the store (or was superseded
// by a higher epoch since). Every write goes through the one engine, so
// the brand check, the probe verdict, the retries and the Observer apply
// to all of them alike. A model test checks these promises after every
// step of random sequences of every write, damage, lost reply and wrapper,
// on every store.
//
// Damage in place: a push may skip its read and condition its write on the
// version it remembers. That is safe because a store's version names its
// bytes: S3 and Azure ETags, GCS generations and etcd mod revisions
// (package etcdstore) change with any write, and the stores that keep their
// version beside the bytes (DirConditionalStore, ValkeyConditionalStore,
// whose value can be edited by hand, dynamostore, whose item an UpdateItem
// can change, and pgstore, whose row an UPDATE can change) check the bytes
// they hold and refuse a write over damaged ones with ErrCorrupt, naming a
// version of the damage itself that Settle can replace, and the head of the
// damaged data, from which the record's header (and its epoch) is still
// read when it is intact. ValkeyConditionalStore's writes check a bounded
// part of a value, its first 3900 bytes, its last 100 and its length, so
// that a write costs the same whatever the size; damage in the middle of a
// larger value is found by the reads that read it whole (Latest), and a
// steady push over it replaces the value (see ConditionalStore).
//
// Durability is the store's: a push that returned nil survives what the
// store survives.
//
//   - S3 and GCS acknowledge a write once it is durable; nothing to
//     configure.
//   - DirConditionalStore fsyncs the file and its directory before a write
//     returns; a local disk's durability, one host.
//   - MemStore is memory: for tests and demos.
//   - Valkey replicates asynchronously: a primary acknowledges a write and
//     can lose it when a replica is promoted, and a second push at the same
//     epoch can then also land. With a replica and failover (Sentinel, a
//     cluster, or by hand), set ValkeyConditionalStore.WaitReplicas (and
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
