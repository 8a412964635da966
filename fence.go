package writefence

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// Defaults for the zero values of the Fence's settings.
const (
	defaultIdentity       = defaults.Identity // "writefence/v1", the package's record format
	defaultMaxPayloadSize = defaults.MaxPayloadSize
	defaultMaxAttempts    = 10
	defaultRetryDelay     = 5 * time.Millisecond
	maxRetryDelay         = 500 * time.Millisecond
)

// Fence admits a write to a shard's mirror record only if its epoch is
// strictly greater than the epoch the record holds, and lands the epoch and
// the payload in one conditional write on Store. See the package
// documentation for the protocol.
//
// The zero value, given a Store, is ready to use: every other field has a
// documented default. A Fence is safe for concurrent use and must not be
// copied after first use. Set the fields before the first write.
type Fence struct {
	// Store holds the records. Required.
	Store ConditionalStore

	// Identity is the record-level wire identity written into every record
	// and required of every record read, at most 255 bytes. Empty means
	// "writefence/v1", the package's record format. A
	// record of another identity is refused with a *WireError.
	Identity string

	// Prefix is prepended to every key; empty means "writefence/". It ends
	// in "/", and none of its segments is "s" or "b" or starts with "_",
	// so that no prefix reaches into the keys of another (ErrInvalidArgument
	// otherwise): Fences under "a/" and "a/b/" would share keys.
	Prefix string

	// Blobs is where the shards' blobs live (PutBlob, OpenBlob, Collect):
	// a store that declares BlobStore, under the same Prefix; nil means
	// Store. A store without blobs (Valkey) keeps the manifests while an
	// object store keeps the blobs.
	Blobs ConditionalStore

	// MaxPayloadSize bounds the payload of a record; zero means 64 MiB. The
	// Store's read limit must allow a record of this payload plus 4 KiB for
	// its header (the stores' default limit is 64 MiB + 4 KiB).
	MaxPayloadSize int64

	// MaxAttempts bounds the attempts (a read, a decision, a conditional
	// write) of one write; zero means 10. When every attempt conflicts the
	// write returns an error matching ErrConflict; when a write's outcome
	// stays hidden, one matching ErrOutcomeUnknown.
	MaxAttempts int

	// RetryDelay is the base of the jittered exponential back-off before
	// every retry, whatever failed; zero means 5ms. The delay before
	// attempt n+1 is uniform in (0, min(RetryDelay<<(n-1), 500ms)].
	RetryDelay time.Duration

	// Probe, when true, runs Probe on Store once before the first write, on
	// scratch keys in the reserved space under Prefix, and refuses every
	// write with its *ProbeError (ErrUntrustedStore) if the store fails it.
	// A pass and an untrusted verdict are kept for the Fence's lifetime; a
	// failure to probe (network, auth, a done ctx) is returned by that
	// write and the next write probes again. False means no probe.
	Probe bool

	probe verdictOnce // the kept verdict of the probe

	// Brand says when the store's brand, the store-level wire identity
	// under Prefix, is checked: the zero value never (see BrandMode). The
	// brand must hold Identity.
	Brand BrandMode

	brandOnce verdictOnce // the kept outcome of a once-mode brand check

	// Observer, when set, sees how every write ended (see WriteEvent), for
	// metrics or logs: every write of a record, of a Lease on this Fence
	// and of the brand. It is called synchronously on the writing
	// goroutine, from many goroutines at once: it must be safe for
	// concurrent use and quick. Nil means none.
	Observer func(ctx context.Context, e WriteEvent)

	// KeepFloor keeps each shard's floor apart from its record, so that a
	// record deleted or set back (a lifecycle rule, a TTL, eviction, an
	// operator's delete, a restore from backup) is refused by every Fence,
	// not only by one that saw the record before (see Forget):
	//
	//   - a Seal, once its record landed, and a Settle enter their epoch in
	//     the shard's floor, a key of the reserved space (Prefix + "_floor/"
	//     + plugin + "/" + shard), which the record's loss does not reach;
	//   - every write of a record reads the floor first, and refuses with
	//     an *EpochRegressedError (ErrEpochRegressed) when it finds the
	//     record absent or below the floor: a write lands only on a record
	//     at or above it;
	//   - a shard's first record is written only by a Seal (a takeover's,
	//     or a new shard's explicit one) or a Settle: a Push, Update or
	//     Commit that finds no record and no floor refuses with an error
	//     matching ErrNotFound.
	//
	// It costs a read of the floor key on every write of a record, and a
	// write of it on every seal. The floor is kept by seals and settles,
	// not by every push, so within a tenure (above the last seal) it is
	// the writer's own Fence that finds the record set back; and it lives
	// in the same store, so a loss that reaches the whole store (a restore
	// of all of it, FLUSHALL) reaches the floor too. Chosen over keeping the
	// floor in the lease record (only Lease users have one) or in the brand
	// key (one key for every shard, a write of it on every seal of any
	// shard): a key per shard is read by the writes of that shard alone.
	// The floor's key holds a record's header of the seal's epoch and
	// writer: damage to it is refused as ErrCorrupt naming it. Set it on
	// every Fence that writes the shards, before the first seal. False
	// means no floor is kept: absent is epoch 0.
	KeepFloor bool

	mu    sync.Mutex              // guards cache
	cache map[uint64]cachedRecord // by a hash of the record's key

	deposed deposition // the contexts Deposed handed out
}

// Push writes payload as the record of (plugin, shard) at epoch, on behalf
// of writer, if and only if epoch is strictly greater than the epoch the
// store records. In order it:
//
//  1. validates the arguments (an error matching ErrInvalidArgument);
//  2. reads the recorded state: absent is epoch 0; a record that fails to
//     decode refuses with ErrCorrupt and one of another identity with
//     ErrWire, without writing; so does, with an *EpochRegressedError
//     (ErrEpochRegressed), a record absent or below the highest epoch this
//     Fence wrote or read of it, or below the shard's floor (KeepFloor),
//     when the push would otherwise land: the record was lost or set
//     back, which only an operator settles (Settlement.Lost, Forget);
//  3. refuses with a *StaleEpochError (ErrStaleEpoch) unless epoch is
//     greater than the recorded epoch, without writing;
//  4. writes the new record with one conditional write on the version read
//     (create-only when absent);
//  5. on ErrConflict re-reads and starts again at 2, after a jittered
//     back-off, at most MaxAttempts attempts in all; then an error
//     matching ErrConflict.
//
// A record that is exactly this push (same epoch, writer and payload) means
// an earlier attempt landed, and Push returns nil: retrying a push whose
// reply was lost never turns it into ErrStaleEpoch. (Unless the record is
// below what the Fence saw of it or the shard's floor: a record set back
// to this push is refused as any other record set back, with an
// *EpochRegressedError.) A write error other than
// a conflict or a refusal leaves the outcome unknown; Push resolves it by
// reading, and returns an *OutcomeUnknownError (ErrOutcomeUnknown) only
// when it cannot. Cancelling ctx stops the retries; the error then matches
// ctx.Err().
//
// Push is Update with a function that returns payload whatever the record
// holds, and reads as little as it can: when the Fence wrote or read the
// record last it conditions its write on that version without reading at
// all (one round trip); on a store that reads prefixes it reads the
// record's head alone (one ranged read of its first 4 KiB, and of a
// stream's record with more references than fit there, one more of its
// header and references), never its payload, whatever its size, and
// decides on that: the header's checksum, identity and epoch, the
// record's size against the lengths the header declares, the references'
// checksum. A store that keeps its version beside its bytes checks its
// bytes on that read and reports damage in place as ErrCorrupt; on a
// store whose version names its bytes and that reads prefixes (S3, GCS,
// Azure Blob) a payload rewritten from outside under an intact header is
// not seen by a Push (see the package documentation, "Damage").
func (f *Fence) Push(ctx context.Context, plugin, shard, writer string, epoch uint64, payload []byte) error {
	u, err := f.newUpdate(opPush, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	if err := f.checkBody(payload, nil); err != nil {
		return err
	}
	u.w = pushWrite{payload: payload, sum: record.CRC32C(payload)}
	return f.runUpdate(ctx, u)
}

// Update replaces the record of (plugin, shard) with next's result at
// epoch, on behalf of writer, if and only if epoch is strictly greater
// than the recorded epoch: a read-modify-write under the fence, such as a
// manifest that lists what the shard's state is made of.
//
// next gets the recorded payload (nil when the shard was never written) and
// returns the payload to write. It is called again with the fresh payload
// after a conflict, so it must depend on nothing but its argument; an error
// from it is returned and nothing is written. The rules are Push's (steps
// 1 to 5), with the whole record read every time: a corrupt record or one
// of another identity refuses, an epoch not above the recorded one returns
// a *StaleEpochError, a conflict reads afresh and calls next again. The
// blobs the record references (see Commit) are kept as they are.
//
// A record at this epoch by this writer is this update, landed earlier,
// when it is byte for byte the record this call wrote last, or when next
// returns its payload unchanged: then Update returns nil without
// writing. So retrying an update whose reply was lost returns nil if next
// is idempotent (applying it to its own result changes nothing, as "add
// segment 42 to the list" does), and ErrStaleEpoch otherwise.
func (f *Fence) Update(ctx context.Context, plugin, shard, writer string, epoch uint64, next func(current []byte) ([]byte, error)) error {
	if next == nil {
		return invalidArg("next", "nil")
	}
	u, err := f.newUpdate(opUpdate, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	u.w = updateWrite{fn: func(m Manifest) (Manifest, error) {
		p, err := next(m.Payload)
		return Manifest{Payload: p, Blobs: m.Blobs}, err
	}}
	return f.runUpdate(ctx, u)
}

// recordUpdate is one Push, Update, Seal or Commit of a record.
type recordUpdate struct {
	f      *Fence
	op     string
	key    string
	writer string
	epoch  uint64

	plugin, shard string
	floor         floorState // the shard's floor, read by this attempt under KeepFloor
	sight         sight      // what was known of the record before this attempt read it

	// w is what this kind of write decides on its own (see recordWrite).
	w recordWrite

	// newTenure: the write starts a tenure at its own epoch, whoever
	// wrote the record before (a seal; see Seal).
	newTenure bool
}

// prior is what a write of a record carries on from the record it
// replaces, besides the payload: the writer and epoch that decide a new
// tenure, and, of a stream's record, its tenure floor, collection horizon
// and references.
type prior struct {
	writer string
	epoch  uint64
	stream *streamState // nil for a plain record, or none
}

// streamState is what a stream's record (format version 3 or 4) holds
// besides its payload.
type streamState struct {
	since   uint64
	horizon int64
	refs    []BlobRef
}

// priorOf is what the sound record with header h and body b hands on.
func priorOf(h record.Header, b record.Body) prior {
	p := prior{writer: h.Writer, epoch: h.Epoch}
	if h.Stream() {
		p.stream = &streamState{since: h.Since, horizon: h.Horizon, refs: b.Refs}
	}
	return p
}

// priorOfBody is what a record this Fence wrote, by writer at epoch,
// hands on.
func priorOfBody(writer string, epoch uint64, b record.Body) prior {
	p := prior{writer: writer, epoch: epoch}
	if b.Stream {
		// A copy: the references may be a slice the caller's next
		// returned, which the caller may use again.
		p.stream = &streamState{since: b.Since, horizon: b.Horizon, refs: slices.Clone(b.Refs)}
	}
	return p
}

// floor is the tenure floor over the record (see record.TenureFloor):
// the floor a stream's record carries, the epoch of a plain one.
func (p prior) floor() uint64 {
	if p.stream != nil {
		return p.stream.since
	}
	return p.epoch
}

// newUpdate validates the arguments every write of a record shares.
func (f *Fence) newUpdate(op, plugin, shard, writer string, epoch uint64) (*recordUpdate, error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return nil, err
	}
	switch {
	case writer == "":
		return nil, invalidArg("writer", "empty")
	case len(writer) > record.MaxWriterLen:
		return nil, invalidArg("writer", "%d bytes, more than %d", len(writer), record.MaxWriterLen)
	case epoch == 0:
		return nil, invalidArg("epoch", "must be at least 1")
	}
	return &recordUpdate{f: f, op: op, key: key, writer: writer, epoch: epoch, plugin: plugin, shard: shard}, nil
}

// checkBody refuses a record whose payload and references together pass
// the Fence's limit.
func (f *Fence) checkBody(payload []byte, refs []BlobRef) error {
	size := int64(len(payload))
	for _, r := range refs {
		size += record.RefEntryFixed + int64(len(r.Name))
	}
	if limit := f.maxPayload(); size > limit {
		return invalidArg("payload", "%d bytes with its references, more than the limit of %d", size, limit)
	}
	return nil
}

// runUpdate runs u through the engine, with the version cache: a push may
// condition its first write on the version the Fence remembers.
func (f *Fence) runUpdate(ctx context.Context, u *recordUpdate) error {
	c := &change{op: u.op, key: u.key, writer: u.writer, epoch: u.epoch, branded: true, deposes: true,
		head: u.w.blind()}
	var floorKey string
	if f.KeepFloor {
		var err error
		if floorKey, err = f.floorKey(u.plugin, u.shard); err != nil {
			return err
		}
	}
	c.before = f.sightBefore(u.key, floorKey, &u.floor, &u.sight)
	var mem cachedRecord
	if u.w.blind() {
		if mem, _ = f.cached(u.key, u.epoch); mem.version != "" {
			c.cached = mem.version
		}
	}
	var wrote record.Body // what the last decision wrote, or found written
	c.decide = func(s *snapshot) ([][]byte, bool, error) {
		if s.cached && mem.epoch < u.sight.epoch {
			return nil, false, errReadWhole // the floor passed what the Fence wrote: see what the record holds
		}
		if s.cached {
			var err error
			if wrote, err = u.w.next(u, Manifest{}, mem.prior); err != nil {
				return nil, false, err
			}
			if err := u.f.checkBody(wrote.Payload, wrote.Refs); err != nil {
				return nil, false, err
			}
			return u.parts(wrote), false, nil
		}
		parts, done, body, err := u.decide(s)
		wrote = body
		return parts, done, err
	}
	out, err := f.run(ctx, c)
	if err != nil {
		f.forget(u.key)
		return err
	}
	f.remember(u.key, cachedRecord{version: out.version, prior: priorOfBody(u.writer, u.epoch, wrote)})
	if u.newTenure && f.KeepFloor {
		return f.enterFloor(ctx, floorKey, u.writer, u.epoch)
	}
	return nil
}

// since is the tenure floor of a record this update writes over prior p:
// a seal starts a tenure at its own epoch; a change of writer starts one
// above every epoch recorded before it; otherwise the floor stays.
func (u *recordUpdate) since(p prior) uint64 {
	switch {
	case u.newTenure:
		return u.epoch
	case p.epoch != 0 && u.writer != p.writer:
		return p.epoch + 1
	}
	return p.floor()
}

// Latest returns the recorded epoch, writer and payload of (plugin, shard).
// A shard never pushed returns an error matching ErrNotFound; a record that
// fails to decode, ErrCorrupt; a record of another identity, ErrWire.
func (f *Fence) Latest(ctx context.Context, plugin, shard string) (epoch uint64, writer string, payload []byte, err error) {
	info, err := f.Inspect(ctx, plugin, shard)
	if err != nil {
		return 0, "", nil, err
	}
	return info.Epoch, info.Writer, info.Payload, nil
}

// key validates the fence's configuration and returns the key of a shard.
func (f *Fence) key(plugin, shard string) (string, error) {
	if err := f.checkConfig(); err != nil {
		return "", err
	}
	return shardKey(f.Prefix, plugin, shard)
}

// checkConfig validates the fields every operation needs.
func (f *Fence) checkConfig() error {
	switch {
	case f.Store == nil:
		return invalidArg("store", "Fence.Store is nil")
	case len(f.Identity) > record.MaxIdentityLen:
		return invalidArg("identity", "%d bytes, more than %d", len(f.Identity), record.MaxIdentityLen)
	}
	return keyErr(keys.CheckPrefix(f.Prefix))
}

func (f *Fence) identity() string { return orDefault(f.Identity, defaultIdentity) }

func (f *Fence) maxPayload() int64 {
	if f.MaxPayloadSize > 0 {
		return f.MaxPayloadSize
	}
	return defaultMaxPayloadSize
}
