package writefence

import (
	"context"
	"fmt"
	"sync"

	"github.com/writefence/writefence/internal/record"
)

// Check reports whether writer still holds (plugin, shard) at epoch, from
// one read of the record's header (not its payload), writing nothing
// (promise 32): nil only if the record holds writer at exactly epoch, or,
// of a stream's record, a tenure of writer's with RecordInfo.Since <= epoch
// <= RecordInfo.Epoch; else *StaleEpochError, *EpochRegressedError (a
// record absent, or below epoch or what the Fence saw), *CorruptError,
// *WireError, ErrInvalidArgument or the failure to read. The window
// after its read is the caller's; it tells no Observer or Deposed context.
func (f *Fence) Check(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	e := f.engine()
	u, err := f.newUpdate(opCheck, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	if err := e.checkBrand(ctx, false); err != nil {
		return err
	}
	seen, err := f.sightNow(ctx, opCheck, plugin, shard, u.key)
	if err != nil {
		return err
	}
	s, err := retried(ctx, e, func() (*snapshot, error) { return e.readKey(ctx, u.key, true) })
	if err != nil {
		return fmt.Errorf("writefence: check %s: read: %w", esc(u.key), err)
	}
	return f.held(u.key, writer, epoch, decodeSnapshot(u.key, s), seen)
}

// sightNow is the sight of the record at key, for a read about to be
// sent by a call of op: what the Fence saw of it, and under KeepFloor the
// floor, read now with a read's retries.
func (f *Fence) sightNow(ctx context.Context, op, plugin, shard, key string) (sight, error) {
	return f.sightWith(ctx, op, plugin, shard, key, f.KeepFloor)
}

// sightWith is sightNow, reading the floor with floor whatever KeepFloor.
func (f *Fence) sightWith(ctx context.Context, op, plugin, shard, key string, floor bool) (sight, error) {
	e := f.engine()
	var fl floorState
	if floor {
		fk, err := e.floorKey(plugin, shard)
		if err != nil {
			return sight{}, err
		}
		if fl, err = retried(ctx, e, func() (floorState, error) { return e.readFloor(ctx, fk) }); err != nil {
			return sight{}, &prefixed{prefix: fmt.Sprintf("writefence: %s %s: read the floor: ", op, esc(key)), err: err}
		}
	}
	return e.sightOf(key, fl), nil
}

// held is Check's decision on the record st, read after seen was known.
func (f *Fence) held(key, writer string, epoch uint64, st decodedRecord, seen sight) error {
	e := f.engine()
	if st.corrupt != nil {
		return st.corrupt
	}
	e.sawRecord(key, st)
	if st.found {
		if err := e.checkIdentity(key, st.h); err != nil {
			return err
		}
	}
	above := st.found && st.h.Epoch >= epoch
	if above && (st.h.Writer != writer || record.TenureFloor(st.h) > epoch) {
		// Refused as a write at epoch would be: stale, before any
		// regression (see decide), whatever the record was set back from.
		return &StaleEpochError{Op: opCheck, Key: key, Epoch: epoch, RecordedEpoch: st.h.Epoch, RecordedWriter: st.h.Writer}
	}
	if err := regression(opCheck, key, epoch, st, seen); err != nil {
		return err
	}
	if !above {
		return &EpochRegressedError{Op: opCheck, Key: key, Epoch: epoch, Seen: epoch, SeenWriter: writer,
			Absent: !st.found, Found: st.h.Epoch, FoundWriter: st.h.Writer}
	}
	return nil
}

// Tenure is one check of CheckAll: a shard, and its expected writer and
// epoch.
type Tenure struct {
	Plugin, Shard string
	Writer        string
	Epoch         uint64
}

// checkAllAtOnce bounds the reads CheckAll has in flight.
const checkAllAtOnce = 16

// CheckAll checks each of tenures as Check does, 16 reads at a time, and
// returns one error per tenure, in their order, each of its own read.
func (f *Fence) CheckAll(ctx context.Context, tenures []Tenure) []error {
	errs := make([]error, len(tenures))
	sem := make(chan struct{}, checkAllAtOnce)
	var wg sync.WaitGroup
	for i, t := range tenures {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			for j := i; j < len(tenures); j++ {
				errs[j] = ctx.Err()
			}
			wg.Wait()
			return errs
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f.Check(ctx, t.Plugin, t.Shard, t.Writer, t.Epoch)
		}()
	}
	wg.Wait()
	return errs
}

// collectRegressed refuses a collection whose record Inspect found absent
// (gone) or at info's epoch below what was known of it before the read
// (seen): the blobs a lost record referenced are all that is left of it.
func collectRegressed(key string, info RecordInfo, gone bool, seen sight) error {
	return regression(opCollect, key, 0, decodedRecord{found: !gone, h: record.Header{Epoch: info.Epoch, Writer: info.Writer}}, seen)
}

// collectHeld checks, right before a batch of Collect's deletes, that the
// record still holds the tenure the collection judged the blobs by: info,
// the record as Inspect read it, with its collection horizon at least
// horizon. A record at a higher epoch is fine, as the rules only widen
// (see Collect); a record gone, set back to a lower epoch, floor or
// horizon, or damaged since, stops the deletes, as a brand of another
// identity does under BrandVerifyAlways. With gone (a shard retired,
// GCOptions.RecordGone) the record must still be absent.
func (f *Fence) collectHeld(ctx context.Context, plugin, shard, key string, info RecordInfo, horizon int64, gone bool) error {
	e := f.engine()
	// Deletes are writes: a Fence that checks the brand before every
	// write reads it before every batch too (promise 10).
	if e.brandEveryWrite() {
		if err := e.verifyBrandRetried(ctx); err != nil {
			return err
		}
	}
	seen, err := f.sightNow(ctx, opCollect, plugin, shard, key)
	if err != nil {
		return err
	}
	s, err := retried(ctx, e, func() (*snapshot, error) { return e.readKey(ctx, key, true) })
	if err != nil {
		return fmt.Errorf("writefence: collect %s: read again before deleting: %w", esc(key), err)
	}
	st := decodeSnapshot(key, s)
	switch {
	case gone && st.found:
		return invalidArg("record", "RecordGone is set, but %s holds a record again: nothing more deleted", esc(key))
	case gone:
		return nil
	case st.corrupt != nil:
		return st.corrupt
	}
	e.sawRecord(key, st)
	if st.found {
		if err := e.checkIdentity(key, st.h); err != nil {
			return err
		}
	}
	if err := regression(opCollect, key, 0, st, seen); err != nil {
		return err
	}
	regressed := &EpochRegressedError{Op: opCollect, Key: key, Seen: info.Epoch, SeenWriter: info.Writer,
		Absent: !st.found, Found: st.h.Epoch, FoundWriter: st.h.Writer}
	switch {
	case !st.found || st.h.Epoch < info.Epoch:
		return regressed
	case record.TenureFloor(st.h) < info.floor() || st.h.Horizon < horizon:
		return &prefixed{prefix: fmt.Sprintf("writefence: collect %s: the record went back to an earlier version of epoch %d, whose tenure floor or collection horizon is lower than the collection judged by: ", esc(key), st.h.Epoch), err: regressed}
	}
	return nil
}
