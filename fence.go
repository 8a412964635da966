package writefence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/writefence/writefence/internal/record"
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

	// Brand says when the store's brand is checked (see BrandMode); the
	// zero value never.
	Brand BrandMode

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

	fenceState // what the Fence keeps between calls
}

// engine returns the engine of one call: the Fence's settings as they
// are now, and its state.
func (f *Fence) engine() *engine {
	return &engine{Store: f.Store, Identity: f.Identity, Prefix: f.Prefix, MaxPayloadSize: f.MaxPayloadSize,
		MaxAttempts: f.MaxAttempts, RetryDelay: f.RetryDelay, Probe: f.Probe, Brand: f.Brand,
		Observer: f.Observer, KeepFloor: f.KeepFloor, fenceState: &f.fenceState}
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
// ctx.Err(). Push reads nothing when this Fence wrote the record last (as
// far as it saw), and otherwise only the record's head where the store
// reads prefixes (see "Damage" in the package documentation).
func (f *Fence) Push(ctx context.Context, plugin, shard, writer string, epoch uint64, payload []byte) error {
	u, err := f.newUpdate(opPush, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	if err := u.f.checkBody(payload, nil); err != nil {
		return err
	}
	u.w = pushWrite{payload: payload, sum: record.CRC32C(payload)}
	return f.runUpdate(ctx, u)
}

// Update replaces the record of (plugin, shard) with next's result at
// epoch, on behalf of writer, by Push's rules; its blob references are
// kept (promise 22). It reads the whole record unless this Fence wrote it
// last and remembers it: a payload of at most 512 bytes in a record of at
// most 1343 bytes (what any store checks on a write), any on S3 and GCS.
// next gets the recorded payload (nil when none) and runs again after a
// conflict or a refusal of the remembered one, so it must depend on its
// argument alone; its error, on a read, is returned, writing nothing. A
// record at this epoch by this writer that this call wrote (Collect may
// have raised its horizon since), or that next leaves unchanged, is this
// update, landed: a retry returns nil if next is idempotent.
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

// newUpdate validates the arguments every write of a record shares.
func (f *Fence) newUpdate(op, plugin, shard, writer string, epoch uint64) (*recordUpdate, error) {
	e := f.engine()
	key, err := e.key(plugin, shard)
	if err != nil {
		return nil, err
	}
	if err := checkWriter("writer", writer); err != nil {
		return nil, err
	}
	if epoch == 0 {
		return nil, invalidArg("epoch", "must be at least 1")
	}
	return &recordUpdate{f: *e, op: op, key: key, writer: writer, epoch: epoch, plugin: plugin, shard: shard}, nil
}

// checkWriter validates w, the name of a record's writer or a lease's
// holder, given as the argument arg: not empty, and at most
// record.MaxWriterLen bytes.
func checkWriter(arg, w string) error {
	switch {
	case w == "":
		return invalidArg(arg, "empty")
	case len(w) > record.MaxWriterLen:
		return invalidArg(arg, "%d bytes, more than %d", len(w), record.MaxWriterLen)
	}
	return nil
}

// runUpdate runs u through the engine, with the version cache: a write
// over a record the Fence remembers may condition its first write on the
// remembered version, without reading (see cachedRecord).
func (f *Fence) runUpdate(ctx context.Context, u *recordUpdate) error {
	e := &u.f
	c := &change{op: u.op, key: u.key, writer: u.writer, epoch: u.epoch, branded: true, deposes: true,
		spares: u.spares, head: u.w.blind()}
	var floorKey string
	if e.KeepFloor {
		var err error
		if floorKey, err = e.floorKey(u.plugin, u.shard); err != nil {
			return err
		}
	}
	c.before = e.sightBefore(u.key, floorKey, &u.floor, &u.sight)
	// A push needs nothing of the record but what the Fence remembers; an
	// update, a seal or a commit needs its payload too.
	mem, _ := e.cache.cached(u.key, u.epoch)
	if mem.version != "" && (u.w.blind() || mem.whole) {
		c.cached = mem.version
	}
	var wrote record.Body // what the last decision wrote, or found written
	var size int64        // its size, encoded
	c.decide = func(s *snapshot) ([][]byte, bool, error) {
		if s.cached && mem.epoch < u.sight.epoch {
			return nil, false, errReadWhole // the floor passed what the Fence wrote: see what the record holds
		}
		if s.cached {
			var current Manifest
			if !u.w.blind() {
				current = mem.manifest()
			}
			u.read = s.version
			var err error
			if wrote, err = u.w.next(u, current, mem.prior); err == nil {
				err = u.f.checkBody(wrote.Payload, wrote.Refs)
			}
			switch {
			case err != nil && !u.w.blind():
				// A refusal of a decision on what the Fence remembers is
				// made again on what the store holds, which may be damage.
				return nil, false, errReadWhole
			case err != nil:
				return nil, false, err
			}
			parts := u.parts(wrote)
			size = partsSize(parts)
			return parts, false, nil
		}
		parts, done, body, err := u.decide(s)
		wrote, size = body, partsSize(parts)
		if done {
			size = s.size
		}
		return parts, done, err
	}
	out, err := e.run(ctx, c)
	if err != nil {
		e.cache.forget(u.key)
		return err
	}
	_, named := capability[bytesNamed](e.Store)
	e.cache.remember(u.key, rememberWrite(out.version, priorOfBody(u.writer, u.epoch, wrote), wrote.Payload, size, named))
	if u.newTenure && e.KeepFloor {
		return e.enterFloor(ctx, floorKey, u.writer, u.epoch)
	}
	return nil
}

// partsSize is the size of the concatenation of parts.
func partsSize(parts [][]byte) int64 {
	var n int64
	for _, p := range parts {
		n += int64(len(p))
	}
	return n
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

// Deposed returns a context derived from ctx, cancelled the moment this
// Fence learns that its writer of (plugin, shard) is deposed: a Push,
// PushFrom, Update, Commit or Seal by f refused as stale (promise 18; the
// cause is the *StaleEpochError), or a Lease on f that gates the shard
// lost or expired (promise 16; the cause is the Lease's error). Only
// refusals after the call count. An invalid name returns a context already
// cancelled with the *InvalidArgumentError; stop cancels it with
// context.Canceled.
func (f *Fence) Deposed(ctx context.Context, plugin, shard string) (deposed context.Context, stop context.CancelFunc) {
	dctx, cancel := context.WithCancelCause(ctx)
	key, err := f.engine().key(plugin, shard)
	if err != nil {
		cancel(err)
		return dctx, func() {}
	}
	w := &deposedWaiter{key: key, cancel: cancel}
	f.deposed.add(w)
	// However the context ends (stop, ctx, a refusal), it is forgotten.
	context.AfterFunc(dctx, func() { f.deposed.remove(w) })
	return dctx, func() {
		f.deposed.remove(w)
		cancel(context.Canceled)
	}
}

// Forget drops what the Fence remembers of the record of (plugin, shard),
// its version and the highest epoch it saw, so that its writes admit the
// record as it is, a lower epoch included: an operator's way out of
// ErrEpochRegressed for a record set back on purpose; no other Fence or
// floor changes. An invalid name returns an error matching
// ErrInvalidArgument.
func (f *Fence) Forget(plugin, shard string) error {
	key, err := f.engine().key(plugin, shard)
	if err != nil {
		return err
	}
	f.cache.drop(key)
	return nil
}

// RecordInfo is what Inspect learned of a shard's record from one read.
type RecordInfo struct {
	Key      string    // the record's key
	Version  string    // the store's version token of exactly the bytes decoded
	Identity string    // the wire identity the record carries
	Epoch    uint64    // the recorded epoch
	Writer   string    // the writer of the record
	Payload  []byte    // the payload
	Blobs    []BlobRef // the blobs it references (see Commit), also of a corrupt record whose references decode
	Since    uint64    // the epoch its writer's tenure began (see Commit); 0 in a record of no stream
	Horizon  time.Time // the collection horizon, by the blob store's clock (see Collect); zero when none
	Stream   bool      // a stream's record (format version 3 or 4), as every later record of the shard is
}

// floor is the tenure floor Commit and Collect apply over the record (see
// record.TenureFloor): Since in a stream's record, the epoch in a plain one.
func (i RecordInfo) floor() uint64 {
	if i.Stream {
		return i.Since
	}
	return i.Epoch
}

// horizon is the record's collection horizon in Unix nanoseconds, 0 for
// none.
func (i RecordInfo) horizon() int64 {
	if i.Horizon.IsZero() {
		return 0
	}
	return i.Horizon.UnixNano()
}

// Inspect is Latest with the manifest's references (a stream's reader
// follows them) and what an operator looks at before settling: the
// version of exactly the bytes decoded, the identity, tenure floor and horizon.
// On ErrCorrupt it still returns Key and Version (what Settle needs),
// Identity, Epoch and Writer when the header decodes, and Blobs when the
// references do; on ErrWire, the whole record. The epoch it reads counts
// as seen (see Forget).
func (f *Fence) Inspect(ctx context.Context, plugin, shard string) (RecordInfo, error) {
	e := f.engine()
	key, err := e.key(plugin, shard)
	if err != nil {
		return RecordInfo{}, err
	}
	if err := e.checkBrand(ctx, false); err != nil {
		return RecordInfo{Key: key}, err
	}
	info := RecordInfo{Key: key}
	s, err := retried(ctx, e, func() (*snapshot, error) { return e.readKey(ctx, key, false) })
	if err != nil {
		return info, &prefixed{prefix: fmt.Sprintf("writefence: inspect %s: ", esc(key)), err: err}
	}
	st := decodeSnapshot(key, s)
	e.sawRecord(key, st)
	if !st.found {
		return info, fmt.Errorf("writefence: inspect %s: %w", esc(key), ErrNotFound)
	}
	info.Version = st.version
	if st.h.Epoch != 0 {
		// The header decoded, whatever check failed after it: its epoch
		// and writer are what Settle must not go below.
		info.Identity, info.Epoch, info.Writer = st.h.Identity, st.h.Epoch, st.h.Writer
	}
	if st.corrupt != nil {
		if st.h.Epoch != 0 && st.salvagedKnown {
			info.Blobs, info.Since, info.Stream = st.salvaged, st.h.Since, st.h.Stream()
			info.Horizon = horizonTime(st.h.Horizon)
		}
		return info, st.corrupt
	}
	info.Payload, info.Blobs, info.Since = st.body.Payload, st.body.Refs, st.body.Since
	info.Stream, info.Horizon = st.body.Stream, horizonTime(st.body.Horizon)
	return info, e.checkIdentity(key, st.h)
}

// horizonTime is a record's collection horizon as a time; zero for none.
func horizonTime(h int64) time.Time {
	if h == 0 {
		return time.Time{}
	}
	return time.Unix(0, h)
}

// blobStore returns the store of the Fence's blobs: Blobs, or Store when
// Blobs is nil. The capability helpers (WriteBlob, StatBlobs,
// DeleteBlobs) are called on it.
func (f *Fence) blobStore() ConditionalStore {
	if f.Blobs != nil {
		return f.Blobs
	}
	return f.Store
}

// blobs returns the BlobStore of the Fence's blobs.
func (f *Fence) blobs() (BlobStore, error) {
	s := f.blobStore()
	if bs, ok := capability[BlobStore](s); ok {
		return bs, nil
	}
	return nil, fmt.Errorf("writefence: the blob store %T holds no blobs (it declares no BlobStore): %w", s, errors.ErrUnsupported)
}
