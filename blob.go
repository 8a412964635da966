package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// Streams: a shard's state as many immutable blobs (WAL segments,
// snapshots of any size) and one small record, the manifest, that says
// which of them make it up. The fence admits the manifest; the blobs are
// made harmless:
//
//   - a blob is written once, streamed, at a key of the shard's own blob
//     space (Prefix + "b/" + plugin + "/" + shard + "/" + name) that no
//     record key or reserved key reaches, and whose name carries the epoch
//     and the writer that wrote it and an id of the time and 80 random
//     bits (see blobIDs.next), so no blob key is ever written twice and a
//     deposed writer's blob never replaces a live one's;
//   - the manifest is a record (format version 3) that lists the blobs it
//     references with their size and CRC-32C; Commit writes it at a strict
//     epoch, through the engine every write takes, and only while every
//     blob it newly references exists;
//   - a reader opens a blob only through the recorded manifest
//     (OpenBlob), and the bytes it reads are checked against the
//     reference: it never sees the bytes of a writer whose epoch was not
//     admitted, nor damaged bytes;
//   - Collect deletes what no manifest can reference: never a blob the
//     recorded manifest references, nor one a writer still racing at an
//     admissible epoch may yet commit (see Collect for the rule).

// PutBlob streams r, to its end, into a new blob of (plugin, shard) by
// writer at epoch, through WriteBlob, and returns its reference for Commit.
// It holds one part of the blob in memory and reads no manifest. No reader
// sees the blob before a commit references it. It passes the probe verdict
// and the brand and tells the Observer (Op "blob"), but makes one attempt
// (promise 6): r cannot be read twice. On an error, put the blob again (a
// new name); Collect deletes what a failed upload left.
func (f *Fence) PutBlob(ctx context.Context, plugin, shard, writer string, epoch uint64, r io.Reader) (ref BlobRef, err error) {
	e := f.engine()
	u, err := f.newUpdate(opBlob, plugin, shard, writer, epoch)
	if err != nil {
		return BlobRef{}, err
	}
	if nilReader(r) {
		return BlobRef{}, invalidArg("r", "nil")
	}
	if _, err := f.blobs(); err != nil {
		return BlobRef{}, err
	}
	id, err := f.blobIDs.next(time.Now())
	if err != nil {
		return BlobRef{}, err
	}
	name := keys.BlobName(epoch, writer, id)
	key, err := keys.Blob(f.Prefix, plugin, shard, name)
	if err != nil {
		return BlobRef{}, keyErr(err)
	}
	c := &change{op: opBlob, key: key, writer: writer, epoch: epoch, branded: true}
	attempt, start := 0, time.Now()
	defer func() { e.observe(ctx, c, start, false, attempt, err) }()
	if err := e.guard(ctx, c); err != nil {
		return BlobRef{}, err
	}
	if e.brandEveryWrite() {
		// No blob store checks the brand inside its create: it is read
		// right before, as for any store that cannot, and retried as a
		// read is: the reader is not read yet.
		if err := e.verifyBrandRetried(ctx); err != nil {
			return BlobRef{}, err
		}
	}
	attempt = 1
	sum := &countingCRC{h: crc32.New(record.Castagnoli)}
	src := &sourceReader{r: io.TeeReader(r, sum)}
	size, err := WriteBlob(ctx, f.blobStore(), key, src)
	if err != nil {
		// A failure of the caller's reader leaves no blob (BlobStore's
		// contract): its outcome is known.
		ownReader := src.err != nil && errors.Is(err, src.err)
		if !ownReader && !final(err) && !isContextErr(err) && !errors.Is(err, ErrOutcomeUnknown) {
			// A failure that is no refusal may hide a create that landed
			// (a lost reply): the blob may exist, unreferenced (promise 5).
			return BlobRef{}, &OutcomeUnknownError{Op: opBlob, Key: key, Epoch: epoch, Err: &prefixed{err: err}}
		}
		return BlobRef{}, &prefixed{prefix: fmt.Sprintf("writefence: blob %s: ", esc(key)), err: err}
	}
	if src.err != nil {
		// The store took the reader's failure for its end (a store
		// that breaks BlobStore's contract): the blob it holds is cut
		// short. It is deleted, or left to Collect; no reference to it
		// is returned.
		if bs, err := f.blobs(); err == nil {
			_ = bs.DeleteBlob(ctx, key)
		}
		return BlobRef{}, &prefixed{prefix: fmt.Sprintf("writefence: blob %s: the store kept %d bytes of a reader that failed: ", esc(key), size), err: src.err}
	}
	if size != sum.n {
		return BlobRef{}, fmt.Errorf("writefence: blob %s: the store holds %d bytes of the %d written: %w", esc(key), size, sum.n, ErrOutcomeUnknown)
	}
	e.cache.put(u.key, epoch)
	return BlobRef{Name: name, Size: sum.n, CRC: sum.h.Sum32()}, nil
}

// sourceReader keeps the error the caller's reader returned, but io.EOF.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// countingCRC is a CRC-32C and a byte count of what is written to it.
type countingCRC struct {
	h hash.Hash32
	n int64
}

func (c *countingCRC) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// Commit replaces the manifest of (plugin, shard) with next's result at
// epoch, on behalf of writer: Update for a record that references blobs,
// with next given the recorded manifest (empty when the shard was never
// written); for a retry to find its commit landed (promise 5), next must
// leave a manifest that already holds its change as it is. Every blob the
// new manifest references that the recorded one does not must (promise 20)
// have been written by writer at an epoch not above the commit's and not
// below the tenure floor, else ErrInvalidArgument; and
// must exist with the size referenced, created at or after the record's
// collection horizon, when the commit decides, else ErrNotFound
// (ErrInvalidArgument for size). A blob the recorded manifest references
// keeps its reference, size and checksum (ErrInvalidArgument); a new
// one's checksum is PutBlob's, which OpenBlob checks.
//
// The tenure floor is where the writer's tenure began: a commit by another
// writer than the recorded one starts a tenure at the recorded epoch + 1,
// a Seal or a Settle one at its own epoch (promise 21), and a record never
// committed holds one at its epoch, so no deposed writer's blob is ever
// committed. Writer names must be unique among a shard's writers. The
// manifest, and every later record, is a stream's (format 3 or 4), which
// older readers refuse.
func (f *Fence) Commit(ctx context.Context, plugin, shard, writer string, epoch uint64, next func(current Manifest) (Manifest, error)) error {
	if next == nil {
		return invalidArg("next", "nil")
	}
	u, err := f.newUpdate(opCommit, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	space, err := keys.Blobs(f.Prefix, plugin, shard)
	if err != nil {
		return keyErr(err)
	}
	ahead := f.listAhead(ctx, u, space)
	defer ahead.stop()
	u.w = commitWrite{updateWrite: updateWrite{fn: next}, check: func(current, refs []BlobRef, floor uint64, horizon int64, read string) error {
		return f.checkBlobs(ctx, u.key, space, writer, epoch, current, refs, floor, horizon, ahead.at(read))
	}}
	return f.runUpdate(ctx, u)
}

// listAhead starts, beside the commit u's read of its record, the listing
// its check of new blobs will most likely want: of the blobs of the epoch
// of the last blob this Fence put for the shard (the usual commit adds the
// blobs its writer just put), after the last of them the record
// references (blob names sort in the order they were put, so what the
// writer put since is after it, however long the epoch), on a store whose
// listing is consistent. A commit so waits for the slower of the read and
// the listing, not for both; one that adds no blob of that epoch leaves
// the listing unused, and does not wait for it. The listing is evidence
// only for a read that finds the record at the version this Fence wrote
// last, the one it remembers now (see aheadListing): it lists nothing
// when it remembers none, or when it put no blob for the shard.
func (f *Fence) listAhead(ctx context.Context, u *recordUpdate, space string) *aheadListing {
	lister, ok := capability[ConsistentBlobLister](f.blobStore())
	if !ok {
		return nil
	}
	epoch, version, refs, ok := u.f.cache.lastPut(u.key)
	if !ok || version == "" || epoch > u.epoch {
		return nil
	}
	// The budget of a listing of up to listBudget new blobs (see
	// listBlobs).
	budget := 2 * listBudget
	if b := hook.ListBudget(ctx); b > 0 {
		budget = b
	}
	// A name whose time is ahead of the latest this Fence could have put
	// (another process's clock ran ahead, or its id is of the random ones
	// from before ids had a time) is passed over: a start after it would
	// pass the new blobs, which the check would then list again.
	prefix, after, latest := space+keys.BlobEpochPrefix(epoch), "", f.blobIDs.latest(time.Now())
	for _, r := range refs {
		k := space + r.Name
		if _, id, _, ok := keys.ParseBlobName(r.Name); ok && id[:12] <= latest && strings.HasPrefix(k, prefix) && k > after {
			after = k
		}
	}
	return listAhead(ctx, lister, prefix, after, budget, version)
}

// OpenBlob opens the blob name of (plugin, shard) if and only if the
// recorded manifest, read as Latest reads it, references it (else
// ErrNotFound), and returns a reader of its bytes and its reference. More,
// fewer or other bytes than the reference says end the read with an error
// matching ErrCorrupt, returned by the read that would bring the last byte
// and with none of its bytes: the bytes are checked once the reference's
// size was read without an error (io.ReadFull) or the read reached io.EOF.
func (f *Fence) OpenBlob(ctx context.Context, plugin, shard, name string) (io.ReadCloser, BlobRef, error) {
	info, err := f.Inspect(ctx, plugin, shard)
	if err != nil {
		return nil, BlobRef{}, err
	}
	i := slices.IndexFunc(info.Blobs, func(r BlobRef) bool { return r.Name == name })
	if i < 0 {
		return nil, BlobRef{}, fmt.Errorf("writefence: blob %s is not referenced by the manifest at %s: %w", esc(name), esc(info.Key), ErrNotFound)
	}
	ref := info.Blobs[i]
	bs, err := f.blobs()
	if err != nil {
		return nil, BlobRef{}, err
	}
	key, err := keys.Blob(f.Prefix, plugin, shard, name)
	if err != nil {
		return nil, BlobRef{}, keyErr(err)
	}
	type opened struct {
		rc io.ReadCloser
		bi BlobInfo
	}
	o, err := retried(ctx, f.engine(), func() (opened, error) {
		rc, bi, err := bs.OpenBlob(ctx, key)
		return opened{rc, bi}, err
	})
	rc, bi := o.rc, o.bi
	if errors.Is(err, ErrNotFound) {
		// Gone. A commit since the read may have dropped it and Collect
		// deleted it, which is no damage: the record, read again, tells.
		// Still referenced and gone, the store lost it, or something
		// outside the library deleted it.
		again, rerr := f.Inspect(ctx, plugin, shard)
		switch {
		case rerr != nil:
			return nil, BlobRef{}, rerr
		case !slices.ContainsFunc(again.Blobs, func(r BlobRef) bool { return r == ref }):
			return nil, BlobRef{}, fmt.Errorf("writefence: blob %s is no longer referenced by the manifest at %s: %w", esc(name), esc(again.Key), ErrNotFound)
		}
		return nil, BlobRef{}, &CorruptError{Key: key, Check: "a referenced blob is missing"}
	}
	if err != nil {
		return nil, BlobRef{}, fmt.Errorf("writefence: blob %s: %w", esc(key), err)
	}
	if bi.Size != ref.Size {
		rc.Close()
		return nil, BlobRef{}, &CorruptError{Key: key, Check: fmt.Sprintf("blob size %d, its reference says %d", bi.Size, ref.Size)}
	}
	return &checkedBlob{rc: rc, key: key, ref: ref, h: crc32.New(record.Castagnoli)}, ref, nil
}

// checkedBlob reads a blob and checks it against its reference. The
// checksum is checked on the read that brings the last byte, before that
// read returns: a failed check withholds those bytes (the read returns 0
// and the error), so a caller that reads exactly the reference's size, as
// io.ReadFull does, gets the error too, never the bytes.
type checkedBlob struct {
	rc       io.ReadCloser
	key      string
	ref      BlobRef
	h        hash.Hash32
	n        int64
	verified bool  // all ref.Size bytes were read and matched the checksum
	err      error // the verdict, once reached
}

func (c *checkedBlob) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.rc.Read(p)
	if int64(n) > c.ref.Size-c.n {
		return c.fail("blob longer than its reference")
	}
	c.n += int64(n)
	c.h.Write(p[:n])
	if c.n == c.ref.Size && !c.verified {
		if c.h.Sum32() != c.ref.CRC {
			return c.fail("blob checksum")
		}
		c.verified = true
	}
	switch {
	case err == io.EOF && !c.verified:
		return c.fail("blob shorter than its reference")
	case err == io.EOF:
		c.err = io.EOF
	}
	return n, err
}

// fail ends the read on the damage check found, withholding the bytes of
// the read that found it.
func (c *checkedBlob) fail(check string) (int, error) {
	c.err = &CorruptError{Key: c.key, Check: check}
	return 0, c.err
}

func (c *checkedBlob) Close() error { return c.rc.Close() }

// GCOptions are the settings of one Collect.
type GCOptions struct {
	// Grace is how old an unreferenced blob of the current tenure must be,
	// by the blob store's clock, before Collect deletes it; zero means 24
	// hours. Over a stream's record, a commit of it later than that after
	// its upload began is refused (ErrNotFound).
	Grace time.Duration

	// DryRun reports what Collect would delete, and deletes none of it
	// (on a store that refuses writes, it judges ages by the local clock).
	DryRun bool

	// RecordGone says that the shard's record was removed on purpose and no
	// writer writes it again: Collect then deletes every blob of the shard,
	// refuses one with a record (ErrInvalidArgument), a floor (read whatever
	// KeepFloor) or a record the Fence saw (ErrEpochRegressed: delete the
	// floor, Forget). Without it, a shard with no record is ErrNotFound.
	RecordGone bool
}

// defaultGrace is GCOptions.Grace's default.
const defaultGrace = 24 * time.Hour

// Collect deletes the blobs of (plugin, shard) that no manifest can
// reference, and reports what it found. It never deletes a referenced
// blob. It deletes at once a blob that can never be committed (below the
// manifest's tenure floor, by another writer at an epoch not above the
// manifest's, or before the record's collection horizon): a deposed
// writer's blobs go as soon as its successor commits or seals. Any other
// goes once older than opts.Grace by the blob store's clock (a new blob's
// time), after a write that raises the horizon to that age and changes
// nothing else (Op "collect"); no commit newly references a blob created
// before it (promise 24). A plain record, which no commit wrote, carries
// no horizon: over one, such a blob is kept. On S3 a multipart blob is
// dated by its upload's start; one with no creation time is older than
// any grace.
//
// It deletes nothing on a corrupt record (ErrCorrupt), one of another
// identity (ErrWire), a shard with no record (see GCOptions.RecordGone), or
// a record absent or below what the Fence saw or the floor, RecordGone or
// not (ErrEpochRegressed, promise 29). Before each batch of deletes (up to
// 10,000 blobs on a store that declares BlobBatchDeleter, else 100) it
// reads the record again and stops once the record no longer holds the
// tenure it judged by (promise 32). Damage its listing reports stops
// nothing: Collect deletes what it can judge and returns ErrCorrupt with
// the report (which lists what a failed batch deleted). It passes the
// probe verdict and the brand; many processes may run it at once.
func (f *Fence) Collect(ctx context.Context, plugin, shard string, opts GCOptions) (report GCReport, err error) {
	e := f.engine()
	key, err := e.key(plugin, shard)
	if err != nil {
		return report, err
	}
	space, err := keys.Blobs(f.Prefix, plugin, shard)
	if err != nil {
		return report, keyErr(err)
	}
	// The Observer sees a pass once (promise 27): its horizon's write,
	// which the engine tells, or else its end, refusals included.
	pass, start, attempt, ran := &change{op: opCollect, key: key, branded: true}, time.Now(), 0, false
	defer func() {
		if !ran {
			e.observe(ctx, pass, start, false, attempt, err)
		}
	}()
	bs, err := f.blobs()
	if err != nil {
		return report, err
	}
	if err := e.guard(ctx, pass); err != nil {
		return report, err
	}
	// Collect writes (the clock's blob, the horizon, deletes): under
	// BrandVerifyAlways the brand is read before the first of them.
	if e.brandEveryWrite() {
		if err := e.verifyBrandRetried(ctx); err != nil {
			return report, err
		}
	}
	attempt = 1
	grace := opts.Grace
	if grace <= 0 {
		grace = defaultGrace
	}
	// The store's time first, then the manifest: the time is then no
	// later than the read, so the ages it gives are no larger than true.
	// A dry run over a store that refuses writes (one opened read-only)
	// takes the local clock's time.
	now, err := f.blobClock(ctx, bs)
	if opts.DryRun && errors.Is(err, fs.ErrPermission) {
		now, err = time.Now(), nil
	}
	if err != nil {
		return report, err
	}
	// A shard retired on purpose has no floor either: RecordGone reads it
	// whatever KeepFloor.
	seen, err := f.sightWith(ctx, opCollect, plugin, shard, key, f.KeepFloor || opts.RecordGone)
	if err != nil {
		return report, err
	}
	info, err := f.Inspect(ctx, plugin, shard)
	gone := errors.Is(err, ErrNotFound)
	switch {
	case err != nil && !gone:
		return report, err
	case !gone && opts.RecordGone:
		return report, invalidArg("record", "GCOptions.RecordGone is set, but %s holds a record (epoch %d by %s)", esc(key), info.Epoch, esc(info.Writer))
	}
	// A record this Fence saw, or a floor kept, says the record was lost,
	// not retired (promise 29), RecordGone or not.
	if err := collectRegressed(key, info, gone, seen); err != nil {
		return report, err
	}
	referenced := map[string]bool{}
	for _, r := range info.Blobs {
		referenced[r.Name] = true
	}
	// A blob created before threshold is at least grace old.
	threshold := now.Add(-grace).UnixNano() + 1
	var doomed, aged []BlobInfo
	err = bs.ListBlobs(ctx, space, func(b BlobInfo) error {
		name, ok := strings.CutPrefix(b.Key, space)
		if !ok {
			// A store that lists beyond the prefix asked for is not one
			// whose listing can say what to delete.
			return fmt.Errorf("the store listed %s, outside %s", esc(b.Key), esc(space))
		}
		epoch, _, writer, ok := keys.ParseBlobName(name)
		switch {
		case referenced[name]:
			report.Referenced = append(report.Referenced, b)
		case !ok:
			report.Kept = append(report.Kept, b)
		case gone && opts.RecordGone:
			doomed = append(doomed, b)
		case gone:
			report.Kept = append(report.Kept, b)
		case uncommittable(epoch, writer, info), info.horizon() != 0 && b.Modified.UnixNano() < info.horizon():
			doomed = append(doomed, b)
		case b.Modified.UnixNano() < threshold && info.Stream:
			// A horizon is a stream record's: over a plain one, a blob
			// its writer may yet commit is kept.
			aged = append(aged, b)
		default:
			report.Kept = append(report.Kept, b)
		}
		return nil
	})
	// Damage the listing reports (a file the store cannot name, say)
	// makes no listed blob less collectable: a blob Collect cannot name is
	// one it never deletes. It is reported once the rest is done.
	var damage error
	switch {
	case err != nil && ctx.Err() != nil:
		return report, ctx.Err()
	case err != nil && onlyDamage(err):
		damage = &prefixed{prefix: fmt.Sprintf("writefence: collect %s: list: ", esc(space)), err: err}
	case err != nil:
		return report, &prefixed{prefix: fmt.Sprintf("writefence: collect %s: list: ", esc(space)), err: err}
	}
	switch {
	case gone && !opts.RecordGone && len(report.Kept) == 0:
		return report, fmt.Errorf("writefence: collect %s: no such shard: no record at %s and no blob: %w", esc(space), esc(key), ErrNotFound)
	case gone && !opts.RecordGone:
		return report, fmt.Errorf("writefence: collect %s: the shard has %d blobs but no record at %s: nothing deleted (a Fence with another store or prefix than the writers', or a record lost? GCOptions.RecordGone deletes the blobs of a shard retired on purpose): %w",
			esc(space), len(report.Kept), esc(key), ErrNotFound)
	}
	horizon := info.horizon() // the horizon the deletes rely on
	if len(aged) > 0 && opts.DryRun {
		doomed = append(doomed, aged...)
	} else if len(aged) > 0 {
		ran = true
		refs, raised, err := f.raiseHorizon(ctx, plugin, shard, key, threshold)
		if err != nil {
			return report, err
		}
		if raised {
			horizon = threshold
		}
		for _, b := range aged {
			if !raised {
				report.Kept = append(report.Kept, b) // the record is plain now: no horizon
			} else if slices.ContainsFunc(refs, func(r BlobRef) bool { return space+r.Name == b.Key }) {
				report.Referenced = append(report.Referenced, b)
			} else {
				doomed = append(doomed, b)
			}
		}
	}
	held := func() error { return f.collectHeld(ctx, plugin, shard, key, info, horizon, gone) }
	if err := f.deleteDoomed(ctx, doomed, opts.DryRun, held, &report); err != nil {
		return report, err
	}
	return report, damage
}

// raiseHorizon raises the collection horizon of the record at key, of
// (plugin, shard), to at least horizon, through the engine, changing
// nothing else in it, and returns the references of the record that then
// carries it: no commit can newly reference a blob created before the
// horizon from then on. A plain record carries no horizon: raised is false
// when the record is one (it was made plain since Collect read it). Under
// KeepFloor every attempt reads the floor, as every write of the record
// does: what the Fence remembers may be gone.
func (f *Fence) raiseHorizon(ctx context.Context, plugin, shard, key string, horizon int64) (refs []BlobRef, raised bool, err error) {
	e := f.engine()
	var floorKey string
	if e.KeepFloor {
		if floorKey, err = e.floorKey(plugin, shard); err != nil {
			return nil, false, err
		}
	}
	var seen sight
	var fl floorState
	_, err = e.run(ctx, &change{op: opCollect, key: key, branded: true, before: e.sightBefore(key, floorKey, &fl, &seen), decide: func(s *snapshot) ([][]byte, bool, error) {
		st := decodeSnapshot(key, s)
		if st.corrupt != nil {
			return nil, false, st.corrupt
		}
		if st.found {
			if err := e.checkIdentity(key, st.h); err != nil {
				return nil, false, err
			}
			e.sawRecord(key, st)
		}
		if err := regression(opCollect, key, 0, st, seen); err != nil {
			return nil, false, err
		}
		if !st.found {
			return nil, false, fmt.Errorf("writefence: collect %s: the record is gone: %w", esc(key), ErrNotFound)
		}
		// Of the record the last attempt decided on.
		refs, raised = st.body.Refs, st.body.Stream
		if !raised || st.h.Horizon >= horizon {
			return nil, true, nil
		}
		b := st.body
		b.Stream, b.Since, b.Horizon = true, record.TenureFloor(st.h), horizon
		return record.Encode(st.h.Identity, st.h.Writer, st.h.Epoch, b, record.CRC32C(b.Payload)), false, nil
	}})
	f.cache.forget(key)
	return refs, raised, err
}

// uncommittable reports whether a blob written at epoch by writer can never
// be committed over the record described by info: a commit newly references
// only its own writer's blobs of its tenure (see Commit), and a writer
// other than the recorded one starts its tenure above the recorded epoch.
func uncommittable(epoch uint64, writer string, info RecordInfo) bool {
	if info.Epoch == 0 {
		return false
	}
	return epoch < info.floor() || writer != info.Writer && epoch <= info.Epoch
}

// blobClock returns the blob store's time: the creation time it gives a
// fresh, empty blob in the reserved space, which is then deleted. Each is
// retried as a read is; nothing else deletes a blob of that space, so a
// create that failed (its reply may have been lost) is deleted too.
func (f *Fence) blobClock(ctx context.Context, bs BlobStore) (time.Time, error) {
	e := f.engine()
	var key string
	info, err := retried(ctx, e, func() (BlobInfo, error) {
		id, err := randomHex(16)
		if err != nil {
			return BlobInfo{}, err
		}
		key = keys.Clock(f.Prefix, id)
		info, err := bs.CreateBlob(ctx, key, bytes.NewReader(nil))
		if err != nil {
			_ = bs.DeleteBlob(ctx, key)
		}
		return info, err
	})
	if err != nil {
		return time.Time{}, &prefixed{prefix: "writefence: the blob store's clock: ", err: err}
	}
	if _, err := retried(ctx, e, func() (struct{}, error) { return struct{}{}, bs.DeleteBlob(ctx, key) }); err != nil {
		return time.Time{}, &prefixed{prefix: "writefence: the blob store's clock: ", err: err}
	}
	return info.Modified, nil
}

// checkBlobs checks the blobs a commit to the record at key, by writer
// at epoch, newly references (refs; current are those the record
// references already): that each was written by writer at an
// epoch not above the commit's and not below floor, the tenure floor
// (their names say so), and that each exists with the size referenced,
// created at or after horizon, the record's collection horizon (see
// Commit). The names are checked first, which costs nothing; then the
// blobs, with StatBlobs over the prefixes of their epochs, and ahead, the
// listing started beside the read (see listAhead), nil unless the record
// read is at the version it was started at. A failure to
// read that is not a refusal is a readFailure, which the engine retries.
func (f *Fence) checkBlobs(ctx context.Context, key, space, writer string, epoch uint64, current, refs []BlobRef, floor uint64, horizon int64, ahead *aheadListing) error {
	var prefixes, blobKeys []string
	for _, r := range refs {
		e, _, w, ok := keys.ParseBlobName(r.Name)
		switch {
		case !ok:
			return invalidArg("blob", "%s is not a blob name", esc(r.Name))
		case w != writer:
			return invalidArg("blob", "%s was written by %s, not %s", esc(r.Name), esc(w), esc(writer))
		case e > epoch:
			return invalidArg("blob", "%s was written at epoch %d, above the commit's %d", esc(r.Name), e, epoch)
		case e < floor:
			return invalidArg("blob", "%s was written at epoch %d, before the tenure that began at epoch %d", esc(r.Name), e, floor)
		}
		if p := space + keys.BlobEpochPrefix(e); !slices.Contains(prefixes, p) {
			prefixes = append(prefixes, p)
		}
		blobKeys = append(blobKeys, space+r.Name)
	}
	if len(refs) == 0 {
		return nil
	}
	others := make([]string, len(current))
	for i, r := range current {
		others[i] = space + r.Name
	}
	store := f.blobStore()
	found, err := statBlobs(ctx, store, prefixes, blobKeys, others, ahead)
	switch {
	case err != nil && !final(err):
		// A read like any other: retried after a back-off.
		return readFailure{fmt.Errorf("blobs: %w", err)}
	case err != nil:
		return fmt.Errorf("writefence: commit %s: blobs: %w", esc(key), err)
	}
	for _, r := range refs {
		info, ok := found[space+r.Name]
		switch {
		case !ok:
			return fmt.Errorf("writefence: commit %s: blob %s does not exist: %w", esc(key), esc(r.Name), ErrNotFound)
		case info.Size != r.Size:
			return invalidArg("blob", "%s holds %d bytes, its reference says %d", esc(r.Name), info.Size, r.Size)
		case horizon != 0 && info.Modified.UnixNano() < horizon:
			return fmt.Errorf("writefence: commit %s: blob %s was created at %s, before the collection horizon %s, and is garbage: put it again: %w",
				esc(key), esc(r.Name), info.Modified.UTC().Format(time.RFC3339Nano), time.Unix(0, horizon).UTC().Format(time.RFC3339Nano), ErrNotFound)
		}
	}
	return nil
}

// deleteDoomed deletes the doomed blobs of a collection in batches,
// calling held right before each and stopping with its error, and adds
// those it deleted to report.Deleted (all of them, deleting nothing and
// calling held never, with dryRun).
func (f *Fence) deleteDoomed(ctx context.Context, doomed []BlobInfo, dryRun bool, held func() error, report *GCReport) error {
	if dryRun {
		report.Deleted = append(report.Deleted, doomed...)
		return nil
	}
	store := f.blobStore()
	size := collectSerial
	if _, ok := capability[BlobBatchDeleter](store); ok {
		size = collectBatch
	}
	for start := 0; start < len(doomed); start += size {
		if err := held(); err != nil {
			return err
		}
		batch := doomed[start:min(start+size, len(doomed))]
		keys := make([]string, len(batch))
		for i, b := range batch {
			keys[i] = b.Key
		}
		deleted, err := DeleteBlobs(ctx, store, keys)
		gone := make(map[string]bool, len(deleted))
		for _, k := range deleted {
			gone[k] = true
		}
		for _, b := range batch {
			if gone[b.Key] {
				report.Deleted = append(report.Deleted, b)
			}
		}
		if err != nil {
			return fmt.Errorf("writefence: collect: %d of %d blobs left: %w", len(doomed)-len(report.Deleted), len(doomed), err)
		}
	}
	return nil
}

// nilReader reports a reader that cannot be read: nil, or a nil pointer,
// map, func, channel or slice, whose Read would panic inside the store's
// create rather than be refused.
func nilReader(r io.Reader) bool {
	if r == nil {
		return true
	}
	switch v := reflect.ValueOf(r); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice:
		return v.IsNil()
	}
	return false
}
