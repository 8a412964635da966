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

// Fence admits a write to a shard's record only if its epoch is strictly
// greater than the recorded one (see the package documentation). Its zero
// value, given a Store, is ready to use; it is safe for concurrent use. Set
// its fields before the first write, and do not copy it after.
type Fence struct {
	// Store holds the records. Required.
	Store ConditionalStore

	// Identity is the records' wire identity, at most 255 bytes; empty
	// means "writefence/v1".
	Identity string

	// Prefix is prepended to every key; empty means "writefence/". It ends
	// in "/", and no segment is "s" or "b" or starts with "_" (else
	// ErrInvalidArgument), so that no prefix reaches into another's keys.
	Prefix string

	// Blobs is the BlobStore of the shards' blobs; nil means Store.
	Blobs ConditionalStore

	// MaxPayloadSize bounds a record's payload; zero means 64 MiB. The
	// stores' read limit must exceed it by 4 KiB, as their default does.
	MaxPayloadSize int64

	// MaxAttempts bounds the attempts of one write; zero means 10. A write
	// whose every attempt conflicts returns an error matching ErrConflict.
	MaxAttempts int

	// RetryDelay is the base of the jittered exponential back-off before
	// every retry; zero means 5ms. The delay before attempt n+1 is uniform
	// in (0, min(RetryDelay<<(n-1), 500ms)].
	RetryDelay time.Duration

	// Probe runs Probe on Store before the first write, and refuses every
	// write with its *ProbeError if the store fails. A failure to probe
	// fails that write; the next probes again.
	Probe bool

	probe verdictOnce // the kept verdict of the probe

	// Brand says when the store's brand is checked (see BrandMode); the
	// zero value never.
	Brand BrandMode

	brandOnce verdictOnce // the kept outcome of a once-mode brand check

	// Observer, when set, sees how every write ended (see WriteEvent). It
	// is called on the writing goroutines: it must be safe for concurrent
	// use, and quick.
	Observer func(ctx context.Context, e WriteEvent)

	// KeepFloor keeps each shard's floor, the epoch of its last Seal or
	// Settle, in a key of its own that every write reads (promise 31): a
	// record absent or below it is refused (*EpochRegressedError), and as
	// only a Seal or a Settle creates a record, a Push, Update or Commit
	// that finds none returns an error matching ErrNotFound; a damaged
	// floor is ErrCorrupt. Set it on every Fence of the shards before the
	// first seal.
	KeepFloor bool

	mu    sync.Mutex              // guards cache
	cache map[uint64]cachedRecord // by a hash of the record's key

	deposed deposition // the contexts Deposed handed out
}

// Push writes payload as the record of (plugin, shard) at epoch, on behalf
// of writer, if and only if epoch is strictly greater than the recorded
// epoch. It:
//
//  1. validates the arguments (ErrInvalidArgument);
//  2. reads the record: absent is epoch 0; one that fails to decode is
//     refused with ErrCorrupt, one of another identity with ErrWire, and one
//     absent or below what this Fence saw of it or the shard's floor, when
//     the push would otherwise land, with an *EpochRegressedError;
//  3. refuses with a *StaleEpochError unless epoch is greater than the
//     recorded epoch;
//  4. writes with one conditional write on the version read;
//  5. on ErrConflict, backs off and starts again at 2, at most MaxAttempts
//     attempts in all, then returns an error matching ErrConflict.
//
// A refusal writes nothing. A record that is exactly this push (epoch,
// writer and payload) is an earlier attempt that landed: Push returns nil,
// unless it is below what this Fence saw or the floor.
// A write whose outcome a read cannot resolve returns an
// *OutcomeUnknownError (promise 5); a cancelled ctx, an error matching
// ctx.Err(). Push reads nothing when the Fence last wrote or read the
// record, and otherwise only the record's head where the store reads
// prefixes (see "Damage" in the package documentation).
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
// epoch, on behalf of writer, by Push's rules, reading the whole record;
// its blob references are kept (promise 22). next gets the recorded payload
// (nil when there is none) and is called again after a conflict, so it must
// depend on nothing but its argument; its error is returned, writing
// nothing. A record at this epoch by this writer that is byte for byte the
// one this call wrote last (but for a collection horizon Collect raised
// since), or one next leaves unchanged, is this update, landed: Update
// returns nil, so a retry returns nil if next is idempotent.
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
