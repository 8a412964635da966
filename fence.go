package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
)

// Defaults for the zero values of the Fence's settings.
const (
	defaultIdentity       = defaults.Identity // "writefence/v1", the package's record format
	defaultMaxPayloadSize = defaults.MaxPayloadSize
	defaultMaxAttempts    = 10
	defaultRetryDelay     = 5 * time.Millisecond
	maxRetryDelay         = 500 * time.Millisecond
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
	// and required of every record read. Empty means defaultIdentity. A
	// record of another identity is refused with a *WireError.
	Identity string

	// Prefix is prepended to every key; empty means keys.DefaultPrefix.
	Prefix string

	// MaxPayloadSize bounds the payload of a push; zero means
	// defaultMaxPayloadSize. The Store's read limit must allow a record of
	// this payload plus maxHeaderSize.
	MaxPayloadSize int64

	// MaxAttempts bounds the conditional writes one push makes; zero means
	// defaultMaxAttempts. When every attempt conflicts Push returns an error
	// matching ErrConflict.
	MaxAttempts int

	// RetryDelay is the base of the jittered exponential back-off between
	// conflicting attempts; zero means defaultRetryDelay. The delay before
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

// cachedRecord is what the fence remembers of a record it wrote or read: its
// version and epoch. The version lets a push skip the read; the write is
// still conditioned on it, so a stale entry costs one conflict, never a
// wrong admission. The epoch is only used to decide whether skipping the
// read is worth trying; it never refuses a push on its own.
type cachedRecord struct {
	version string
	epoch   uint64
}

// The operations that write a record. Each goes through Fence.write, the
// one write loop, so every guard a write needs is checked in one place.
const (
	opPush   = "push"
	opSeal   = "seal"
	opSettle = "settle"
)

// recordWrite is one validated write of a record: a push, a seal or a
// settle. decide turns what the store records into the record to write.
type recordWrite struct {
	op      string // opPush, opSeal or opSettle
	key     string
	writer  string
	epoch   uint64
	header  []byte // the record's encoded header; a seal sets it in decide
	payload []byte // the payload after it: the caller's bytes, never copied
	crc     uint32 // the payload's CRC-32C, as the header carries it
	record  []byte // header and payload joined, for a store without PartsPutter; built once

	// corruptVersion is, for a settle, the version found corrupt: the
	// only version it may replace.
	corruptVersion string
}

// recorded is what one read of a record's key found.
type recorded struct {
	found   bool
	whole   bool          // the whole record was read, not only its header
	version string        // the version of the bytes read (of the damage, when corrupt)
	h       header        // the decoded header; h.epoch is 0 when it did not decode
	payload []byte        // the payload, on a whole read of a sound record
	corrupt *CorruptError // set when the record, or the store's own check, failed
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

// write is the one write loop of a record, shared by Push, Seal and Settle:
// the brand check and the probe verdict, then read the recorded state,
// decide, one conditional write, and on a conflict back off and read again;
// an ambiguous outcome is settled by the next read. The Observer sees how it
// ended.
func (f *Fence) write(ctx context.Context, w *recordWrite) error {
	attempt := 0
	err := f.checkBrand(ctx, true)
	if err == nil && f.Probe {
		err = f.checkProbe(ctx)
	}
	if err == nil {
		attempt, err = f.attempts(ctx, w)
	}
	f.observe(ctx, w, false, attempt, err)
	return err
}

// attempts runs the read-decide-write attempts of w and returns the attempt
// it ended on.
func (f *Fence) attempts(ctx context.Context, w *recordWrite) (int, error) {
	maxAttempts := f.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = defaultMaxAttempts
	}
	// Only a push may skip its read: a seal carries the recorded payload
	// forward and a settle must see the damage it replaces.
	var version string
	skipRead := false
	if w.op == opPush {
		version, skipRead = f.cached(w.key, w.epoch)
	}
	var unsure error // set once a write's outcome was hidden by an error
	fail := func(err error) error {
		if unsure != nil {
			// An earlier write of ours may have landed and been superseded
			// since; what happened after cannot say, so the error is
			// reported but not matched as a refusal of ours.
			return &OutcomeUnknownError{Op: w.op, Key: w.key, Epoch: w.epoch, Err: fmt.Errorf("%w; then: %v", unsure, err)}
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		if !skipRead {
			st, err := f.read(ctx, w.key, w.op != opPush || f.VerifyPayloadOnPush)
			if err == nil && !st.whole && w.mayBeReplay(st.h) {
				// Only the payload itself can tell this very push from
				// another of the same epoch and writer.
				st, err = f.read(ctx, w.key, true)
			}
			if err != nil {
				return attempt, fail(err)
			}
			done, err := f.decide(w, st)
			if err != nil {
				return attempt, fail(err)
			}
			if done {
				f.remember(w.key, st.version, w.epoch)
				return attempt, nil
			}
			version = st.version // "" when absent: create-only
		}
		skipRead = false

		newVersion, err := f.put(ctx, w, version)
		if err == nil {
			f.remember(w.key, newVersion, w.epoch)
			return attempt, nil
		}
		f.forget(w.key)
		conflict := errors.Is(err, ErrConflict)
		switch {
		case conflict:
		case refusedWrite(err):
			// The store refused and wrote nothing (damage in place, the
			// brand inside its transaction): final, like a read's refusal.
			return attempt, fail(err)
		default:
			// The write may have landed; the next read settles it.
			unsure = err
			if ctx.Err() != nil {
				return attempt, &OutcomeUnknownError{Op: w.op, Key: w.key, Epoch: w.epoch, Err: err}
			}
		}
		if attempt >= maxAttempts {
			if unsure != nil {
				return attempt, &OutcomeUnknownError{Op: w.op, Key: w.key, Epoch: w.epoch, Err: err}
			}
			return attempt, fmt.Errorf("writefence: %s at epoch %d to %s: %d attempts: %w", w.op, w.epoch, esc(w.key), attempt, err)
		}
		if conflict {
			f.observe(ctx, w, true, attempt, err)
			if err := f.backoff(ctx, attempt); err != nil {
				return attempt, fail(err)
			}
		}
	}
}

// refusedWrite reports whether a write's error is a refusal after which
// nothing was written, so that retrying cannot help: a record the store
// found damaged, another wire identity, an argument the store rejects.
func refusedWrite(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrWire) || errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrTooLarge)
}

// decide applies the write's rules to what the store records: done when the
// record already is this write (an earlier attempt landed), else nil to
// write w.record conditioned on st's version, or the refusal.
func (f *Fence) decide(w *recordWrite, st recorded) (done bool, err error) {
	if w.op == opSettle {
		return f.decideSettle(w, st)
	}
	if st.corrupt != nil {
		return false, st.corrupt
	}
	if st.found {
		if err := f.checkIdentity(w.key, st.h); err != nil {
			return false, err
		}
	}
	if w.op == opSeal {
		return f.decideSeal(w, st)
	}
	if st.found && w.mayBeReplay(st.h) && st.whole && bytes.Equal(st.payload, w.payload) {
		return true, nil
	}
	if st.found && w.epoch <= st.h.epoch {
		return false, staleEpoch(w, st.h)
	}
	return false, nil
}

// mayBeReplay reports whether a record with header h may be this very
// write, landed by an earlier attempt: same epoch, writer and payload size,
// and (where the header carries it) the same payload checksum. Only the
// payload bytes themselves decide.
func (w *recordWrite) mayBeReplay(h header) bool {
	return h.epoch == w.epoch && h.writer == w.writer && h.payloadLen == uint64(len(w.payload)) &&
		(h.version == 1 || h.payloadCRC == w.crc)
}

// put makes the write's one conditional write: header and payload as two
// parts on a store that takes parts, so the payload is never copied; joined
// once otherwise.
func (f *Fence) put(ctx context.Context, w *recordWrite, version string) (string, error) {
	if bp, ok := f.Store.(BrandedPutter); ok && f.Brand == BrandVerifyAlways {
		return bp.PutIfBranded(ctx, keys.Brand(f.Prefix), f.identity(), w.key, w.joined(), version)
	}
	if pp, ok := f.Store.(PartsPutter); ok {
		return pp.PutPartsIfVersion(ctx, w.key, [][]byte{w.header, w.payload}, version)
	}
	return f.Store.PutIfVersion(ctx, w.key, w.joined(), version)
}

// joined returns the record as one slice, for a store that takes no parts;
// it is built once per write.
func (w *recordWrite) joined() []byte {
	if w.record == nil {
		w.record = make([]byte, 0, len(w.header)+len(w.payload))
		w.record = append(append(w.record, w.header...), w.payload...)
	}
	return w.record
}

func staleEpoch(w *recordWrite, h header) error {
	return &StaleEpochError{Key: w.key, Epoch: w.epoch, RecordedEpoch: h.epoch, RecordedWriter: h.writer}
}

// read reads the record at key once. A missing record and a corrupt one are
// states, not errors; any other failure is returned. With whole false, on a
// store that can read a prefix, it reads only maxHeaderSize bytes: the
// header is checked (checksum, identity) and the record's size must equal
// the header's size plus the payload length it declares; the payload checksum
// is then left to Latest and to the store's own integrity checks.
func (f *Fence) read(ctx context.Context, key string, whole bool) (recorded, error) {
	pr, ok := f.Store.(PrefixReader)
	if whole || !ok {
		data, version, err := f.Store.Get(ctx, key)
		if err != nil {
			return readState(key, err)
		}
		return decodeState(key, version, data), nil
	}
	prefix, size, version, err := pr.GetPrefix(ctx, key, maxHeaderSize)
	if err != nil {
		return readState(key, err)
	}
	if size <= int64(len(prefix)) {
		return decodeState(key, version, prefix), nil
	}
	st := recorded{found: true, version: version}
	h, check := decodeHeader(prefix)
	if check == "" {
		st.h = h
		switch rest := uint64(size - int64(h.size)); {
		case h.payloadLen > rest:
			check = "truncated payload"
		case h.payloadLen < rest:
			check = "trailing bytes"
		}
	}
	if check != "" {
		st.corrupt = &CorruptError{Key: key, Version: version, Check: check}
	}
	return st, nil
}

// readState turns a failed read into a state (absent, or damaged as the
// store itself found) or the error to return.
func readState(key string, err error) (recorded, error) {
	var ce *CorruptError
	switch {
	case errors.Is(err, ErrNotFound):
		return recorded{}, nil
	case errors.As(err, &ce) && ce.Version != "":
		c := *ce
		if c.Key == "" {
			c.Key = key
		}
		return recorded{found: true, version: c.Version, corrupt: &c}, nil
	}
	return recorded{}, readError(key, err)
}

// decodeState decodes a whole record strictly.
func decodeState(key, version string, data []byte) recorded {
	h, payload, check := decodeRecord(data)
	st := recorded{found: true, whole: true, version: version, h: h, payload: payload}
	if check != "" {
		st.corrupt = &CorruptError{Key: key, Version: version, Check: check}
	}
	return st
}

func readError(key string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("writefence: read %s: %w", esc(key), err)
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

// backoff sleeps before attempt+1, or returns ctx's error if ctx ends first.
func (f *Fence) backoff(ctx context.Context, attempt int) error {
	base := f.RetryDelay
	if base <= 0 {
		base = defaultRetryDelay
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
