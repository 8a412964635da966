package writefence

import (
	"context"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/defaults"
)

// Defaults for the zero values of the Fence's settings.
const (
	defaultIdentity       = defaults.Identity // "writefence/v1", the package's record format
	defaultMaxPayloadSize = defaults.MaxPayloadSize
	defaultMaxAttempts    = 10
	defaultRetryDelay     = 5 * time.Millisecond
	maxRetryDelay         = 500 * time.Millisecond
)

// Fence admits a push to a shard's mirror record only if its epoch is
// strictly greater than the epoch the record holds, and lands the epoch and
// the payload in one conditional write on Store. See the package
// documentation for the protocol.
//
// The zero value, given a Store, is ready to use: every other field has a
// documented default. A Fence is safe for concurrent use and must not be
// copied after first use. Set the fields before the first push.
type Fence struct {
	// Store holds the records. Required.
	Store ConditionalStore

	// Identity is the record-level wire identity written into every record
	// and required of every record read, at most 255 bytes. Empty means
	// "writefence/v1", the package's record format. A
	// record of another identity is refused with a *WireError.
	Identity string

	// Prefix is prepended to every key; empty means "writefence/".
	Prefix string

	// MaxPayloadSize bounds the payload of a push; zero means 64 MiB. The
	// Store's read limit must allow a record of this payload plus 4 KiB for
	// its header (the stores' default limit is 64 MiB + 4 KiB).
	MaxPayloadSize int64

	// MaxAttempts bounds the conditional writes one push makes; zero means
	// 10. When every attempt conflicts Push returns an error
	// matching ErrConflict.
	MaxAttempts int

	// RetryDelay is the base of the jittered exponential back-off between
	// conflicting attempts; zero means 5ms. The delay before
	// attempt n+1 is uniform in [0, min(RetryDelay<<n, 500ms)).
	RetryDelay time.Duration

	// Probe, when true, runs Probe on Store once before the first push, on
	// scratch keys in the reserved space under Prefix, and refuses every
	// push with its *ProbeError (ErrUntrustedStore) if the store fails it.
	// A pass and an untrusted verdict are kept for the Fence's lifetime; a
	// failure to probe (network, auth, a done ctx) is returned by that
	// push and the next push probes again. False means no probe.
	Probe bool

	probe verdictOnce // the kept verdict of the probe

	// Brand says when the store's brand, the store-level wire identity
	// under Prefix, is checked: the zero value never (see BrandMode). The
	// brand must hold Identity.
	Brand BrandMode

	brandOnce verdictOnce // the kept outcome of a once-mode brand check

	// VerifyPayloadOnPush makes Push read and verify the whole recorded
	// record, payload checksum included, before it writes. By default, on a
	// store that implements PrefixReader, Push reads only the record's
	// header and checks its checksum and the record's total size: one
	// header's worth of bytes instead of the whole previous payload. A
	// payload damaged under an intact header is then caught by Latest and
	// by the store's own checksums, not by Push.
	VerifyPayloadOnPush bool

	// Observer, when set, sees every outcome of every write (Push, Seal and
	// Settle; see PushEvent), for metrics or logs. It is called
	// synchronously on the writing goroutine, from many goroutines at once:
	// it must be safe for concurrent use and quick. Nil means none.
	Observer func(ctx context.Context, e PushEvent)

	mu    sync.Mutex // guards cache
	cache map[string]cachedRecord
}

// Push writes payload as the record of (plugin, shard) at epoch, on behalf
// of writer, if and only if epoch is strictly greater than the epoch the
// store records. In order it:
//
//  1. validates the arguments (an error matching ErrInvalidArgument);
//  2. reads the recorded state: absent is epoch 0; a record that fails to
//     decode refuses with ErrCorrupt and one of another identity with
//     ErrWire, without writing;
//  3. refuses with a *StaleEpochError (ErrStaleEpoch) unless epoch is
//     greater than the recorded epoch, without writing;
//  4. writes the new record with one PutIfVersion conditioned on the version
//     read (create-only when absent);
//  5. on ErrConflict re-reads and starts again at 2, after a jittered
//     back-off, at most MaxAttempts writes in all; then an error matching
//     ErrConflict.
//
// A record that is exactly this push (same epoch, writer and payload) means
// an earlier attempt landed, and Push returns nil: retrying a push whose
// reply was lost never turns it into ErrStaleEpoch. A write error other than
// a conflict leaves the outcome unknown; Push settles it by reading, and
// returns an *OutcomeUnknownError (ErrOutcomeUnknown) only when it cannot.
// Cancelling ctx stops the retries; the error then matches ctx.Err().
func (f *Fence) Push(ctx context.Context, plugin, shard, writer string, epoch uint64, payload []byte) error {
	w, err := f.prepare(opPush, plugin, shard, writer, epoch, payload)
	if err != nil {
		return err
	}
	return f.write(ctx, w)
}

// prepare validates a write's arguments and, for a push or a settle, encodes
// its record.
func (f *Fence) prepare(op, plugin, shard, writer string, epoch uint64, payload []byte) (*recordWrite, error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return nil, err
	}
	switch {
	case writer == "":
		return nil, invalidArg("writer", "empty")
	case len(writer) > maxWriterLen:
		return nil, invalidArg("writer", "%d bytes, more than %d", len(writer), maxWriterLen)
	case epoch == 0:
		return nil, invalidArg("epoch", "must be at least 1")
	}
	if limit := f.maxPayload(); int64(len(payload)) > limit {
		return nil, invalidArg("payload", "%d bytes, more than the limit of %d", len(payload), limit)
	}
	w := &recordWrite{op: op, key: key, writer: writer, epoch: epoch, payload: payload}
	if op != opSeal {
		w.crc = crc32Castagnoli(payload)
		w.header = encodeHeader(f.identity(), writer, epoch, uint64(len(payload)), w.crc)
	}
	return w, nil
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
	if f.Store == nil {
		return "", invalidArg("store", "Fence.Store is nil")
	}
	if id := f.Identity; len(id) > maxIdentityLen {
		return "", invalidArg("identity", "%d bytes, more than %d", len(id), maxIdentityLen)
	}
	return shardKey(f.Prefix, plugin, shard)
}

func (f *Fence) identity() string { return orDefault(f.Identity, defaultIdentity) }

func (f *Fence) maxPayload() int64 {
	if f.MaxPayloadSize > 0 {
		return f.MaxPayloadSize
	}
	return defaultMaxPayloadSize
}
