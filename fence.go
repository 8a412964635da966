package writefence

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultIdentity is the record-level wire identity a Fence writes and
// expects when Fence.Identity is empty. It names this package's record
// format; programs that share mirrors with other formats set their own.
const DefaultIdentity = "writefence/v1"

// Defaults for the zero values of the Fence's retry settings.
const (
	DefaultMaxAttempts = 10
	DefaultRetryDelay  = 5 * time.Millisecond
	maxRetryDelay      = 500 * time.Millisecond
)

// maxCached bounds the version cache; past it an arbitrary entry is dropped,
// which costs that shard one read on its next push.
const maxCached = 4096

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
	// and required of every record read. Empty means DefaultIdentity. A
	// record of another identity is refused with a *WireError.
	Identity string

	// Prefix is prepended to every key; empty means DefaultPrefix.
	Prefix string

	// MaxPayloadSize bounds the payload of a push; zero means
	// DefaultMaxPayloadSize. The Store's read limit must allow a record of
	// this payload plus MaxHeaderSize.
	MaxPayloadSize int64

	// MaxAttempts bounds the conditional writes one push makes; zero means
	// DefaultMaxAttempts. When every attempt conflicts Push returns an error
	// matching ErrConflict.
	MaxAttempts int

	// RetryDelay is the base of the jittered exponential back-off between
	// conflicting attempts; zero means DefaultRetryDelay. The delay before
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

	// Brand, when set, is the store-level wire identity checked before
	// pushes as BrandCheck says (see brand.go). A nil Brand.Store means
	// Store; Brand's identity must equal the fence's identity. Nil means
	// no brand check; the record-level identity is checked regardless.
	Brand *Brand

	// BrandCheck says when Brand is checked; the zero value is
	// BrandVerifyOnce. See BrandMode for which mode to use when.
	BrandCheck BrandMode

	brandOnce verdictOnce // the kept outcome of a once-mode brand check

	// VerifyPayloadOnPush makes Push read and verify the whole recorded
	// record, payload digest included, before it writes. By default, on a
	// store that implements PrefixReader, Push reads only the record's
	// header and checks its checksum and the record's total size: one
	// header's worth of bytes instead of the whole previous payload. A
	// payload damaged under an intact header is then caught by Latest and
	// by the store's own checksums, not by Push.
	VerifyPayloadOnPush bool

	// Observer, when set, sees every outcome of every push (see
	// Observer). Nil means none.
	Observer Observer

	mu    sync.Mutex // guards cache
	cache map[string]cachedRecord
}

// cachedRecord is what the fence remembers of a record it wrote or read: its
// version and epoch. The version lets a push skip the read; the write is
// still conditioned on it, so a stale entry costs one conflict, never a
// wrong admission. The epoch is only used to decide whether skipping the
// read is worth trying; it never refuses a push on its own.
type cachedRecord struct {
	version string
	epoch   uint64
}

// pushArgs is one validated push.
type pushArgs struct {
	key    string
	writer string
	epoch  uint64
	digest [sha256.Size]byte
	record []byte
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
	p, err := f.prepare(plugin, shard, writer, epoch, payload)
	if err != nil {
		return err
	}
	attempt := 0
	err = f.checkBrand(ctx, true)
	if err == nil && f.Probe {
		err = f.checkProbe(ctx)
	}
	if err == nil {
		attempt, err = f.push(ctx, p)
	}
	f.observe(ctx, p, outcomeOf(err), attempt, err)
	return err
}

func (f *Fence) prepare(plugin, shard, writer string, epoch uint64, payload []byte) (pushArgs, error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return pushArgs{}, err
	}
	switch {
	case writer == "":
		return pushArgs{}, invalidArg("writer", "empty")
	case len(writer) > MaxWriterLen:
		return pushArgs{}, invalidArg("writer", "%d bytes, more than %d", len(writer), MaxWriterLen)
	case epoch == 0:
		return pushArgs{}, invalidArg("epoch", "must be at least 1")
	}
	if limit := f.maxPayload(); int64(len(payload)) > limit {
		return pushArgs{}, invalidArg("payload", "%d bytes, more than the limit of %d", len(payload), limit)
	}
	digest := sha256.Sum256(payload)
	return pushArgs{
		key:    key,
		writer: writer,
		epoch:  epoch,
		digest: digest,
		record: encodeRecord(f.identity(), writer, epoch, digest, payload),
	}, nil
}

// push runs steps 2 to 5 of Push and returns the attempt it ended on.
func (f *Fence) push(ctx context.Context, p pushArgs) (int, error) {
	maxAttempts := f.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	version, skipRead := f.cached(p.key, p.epoch)
	var unsure error // set once a write's outcome was hidden by an error
	for attempt := 1; ; attempt++ {
		if !skipRead {
			v, done, err := f.admit(ctx, p)
			if err != nil && unsure != nil {
				// An earlier write of ours may have landed and been
				// superseded since; what the read found cannot say, so it
				// is reported but not matched (it is not our refusal).
				return attempt, &OutcomeUnknownError{Key: p.key, Epoch: p.epoch, Err: fmt.Errorf("%w; then: %v", unsure, err)}
			}
			if done || err != nil {
				return attempt, err
			}
			version = v
		}
		skipRead = false

		newVersion, err := f.Store.PutIfVersion(ctx, p.key, p.record, version)
		if err == nil {
			f.remember(p.key, newVersion, p.epoch)
			return attempt, nil
		}
		f.forget(p.key)
		if !errors.Is(err, ErrConflict) {
			// The write may have landed; the next read settles it.
			unsure = err
			if ctx.Err() != nil {
				return attempt, &OutcomeUnknownError{Key: p.key, Epoch: p.epoch, Err: err}
			}
		}
		if attempt >= maxAttempts {
			if unsure != nil {
				return attempt, &OutcomeUnknownError{Key: p.key, Epoch: p.epoch, Err: err}
			}
			return attempt, fmt.Errorf("writefence: push at epoch %d to %s: %d attempts: %w", p.epoch, Escape(p.key), attempt, err)
		}
		if errors.Is(err, ErrConflict) {
			f.observe(ctx, p, ConflictRetried, attempt, err)
			if err := f.backoff(ctx, attempt); err != nil {
				if unsure != nil {
					return attempt, &OutcomeUnknownError{Key: p.key, Epoch: p.epoch, Err: err}
				}
				return attempt, err
			}
		}
	}
}

// admit reads the recorded state of p.key and applies steps 2 and 3 of
// Push. It returns the version to condition the write on, or done when the
// record is already exactly this push, or the refusal.
func (f *Fence) admit(ctx context.Context, p pushArgs) (version string, done bool, err error) {
	h, version, err := f.readHeader(ctx, p.key)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if h.epoch == p.epoch && h.writer == p.writer && h.digest == p.digest {
		f.remember(p.key, version, h.epoch)
		return version, true, nil
	}
	if p.epoch <= h.epoch {
		return "", false, &StaleEpochError{Key: p.key, Epoch: p.epoch, RecordedEpoch: h.epoch, RecordedWriter: h.writer}
	}
	return version, false, nil
}

// readHeader reads the record at key and returns its checked header and
// version. On a store that can read a prefix, and unless
// VerifyPayloadOnPush is set, it reads only MaxHeaderSize bytes: the header
// is checked (checksum, identity) and the record's size must equal the
// header's size plus the payload length it declares; the payload digest is
// then left to Latest and to the store's own integrity checks.
func (f *Fence) readHeader(ctx context.Context, key string) (header, string, error) {
	pr, ok := f.Store.(PrefixReader)
	if !ok || f.VerifyPayloadOnPush {
		data, version, err := f.Store.Get(ctx, key)
		if err != nil {
			return header{}, "", readError(key, err)
		}
		h, _, err := f.decode(key, version, data)
		return h, version, err
	}
	prefix, size, version, err := pr.GetPrefix(ctx, key, MaxHeaderSize)
	if err != nil {
		return header{}, "", readError(key, err)
	}
	if size <= int64(len(prefix)) {
		h, _, err := f.decode(key, version, prefix)
		return h, version, err
	}
	h, check := decodeHeader(prefix)
	if check == "" {
		switch rest := uint64(size - int64(h.size)); {
		case h.payloadLen > rest:
			check = "truncated payload"
		case h.payloadLen < rest:
			check = "trailing bytes"
		}
	}
	if check != "" {
		return h, "", &CorruptError{Key: key, Version: version, Check: check}
	}
	return h, version, f.checkIdentity(key, h)
}

func readError(key string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("writefence: read %s: %w", Escape(key), err)
}

// decode checks a stored record strictly and against the fence's identity.
func (f *Fence) decode(key, version string, data []byte) (header, []byte, error) {
	h, payload, check := decodeRecord(data)
	if check != "" {
		return h, nil, &CorruptError{Key: key, Version: version, Check: check}
	}
	return h, payload, f.checkIdentity(key, h)
}

func (f *Fence) checkIdentity(key string, h header) error {
	if id := f.identity(); h.identity != id {
		return &WireError{Key: key, Expected: id, Found: h.identity}
	}
	return nil
}

// Latest returns the recorded epoch, writer and payload of (plugin, shard).
// A shard never pushed returns an error matching ErrNotFound; a record that
// fails to decode, ErrCorrupt; a record of another identity, ErrWire.
func (f *Fence) Latest(ctx context.Context, plugin, shard string) (epoch uint64, writer string, payload []byte, err error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return 0, "", nil, err
	}
	if err := f.checkBrand(ctx, false); err != nil {
		return 0, "", nil, err
	}
	info, err := f.inspect(ctx, key)
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
	if id := f.Identity; len(id) > MaxIdentityLen {
		return "", invalidArg("identity", "%d bytes, more than %d", len(id), MaxIdentityLen)
	}
	return ShardKey(f.Prefix, plugin, shard)
}

func (f *Fence) identity() string { return orDefault(f.Identity, DefaultIdentity) }

func (f *Fence) maxPayload() int64 {
	if f.MaxPayloadSize > 0 {
		return f.MaxPayloadSize
	}
	return DefaultMaxPayloadSize
}

// backoff sleeps before attempt+1, or returns ctx's error if ctx ends first.
func (f *Fence) backoff(ctx context.Context, attempt int) error {
	base := f.RetryDelay
	if base <= 0 {
		base = DefaultRetryDelay
	}
	ceiling := maxRetryDelay
	if shift := attempt - 1; shift < 16 && base<<shift < ceiling {
		ceiling = base << shift
	}
	t := time.NewTimer(rand.N(ceiling) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// cached returns the version to condition a push at epoch on without
// reading, when the fence wrote or read that key's record at a lower epoch.
func (f *Fence) cached(key string, epoch uint64) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cache[key]
	if !ok || epoch <= c.epoch {
		return "", false
	}
	return c.version, true
}

func (f *Fence) remember(key, version string, epoch uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cache == nil {
		f.cache = make(map[string]cachedRecord)
	}
	if _, ok := f.cache[key]; !ok && len(f.cache) >= maxCached {
		for k := range f.cache {
			delete(f.cache, k)
			break
		}
	}
	f.cache[key] = cachedRecord{version: version, epoch: epoch}
}

func (f *Fence) forget(key string) {
	f.mu.Lock()
	delete(f.cache, key)
	f.mu.Unlock()
}
