package writefence

import "context"

// Seal raises the recorded epoch of (plugin, shard) to epoch without
// changing its payload, so that every push at a lower epoch is refused from
// now on: a new writer's first act, which fences a deposed writer at once
// rather than at the new writer's first push.
//
// Seal reads the record and writes it back with the same payload, epoch and
// writer in its header, in one PutIfVersion conditioned on the version it
// read, so the payload it carries forward is exactly the one recorded at
// that moment; a push landing in between makes the write conflict, and Seal
// reads again. A shard never pushed is sealed with an empty payload:
// leaving it absent would let a deposed writer create it. Latest then
// returns that empty payload, not ErrNotFound.
//
// The rules are Push's: the arguments are validated alike, a corrupt record
// (ErrCorrupt) or one of another identity (ErrWire) refuses without
// writing, and an epoch not greater than the recorded one returns a
// *StaleEpochError (ErrStaleEpoch) — unless the record already is this seal
// (same epoch and writer), when Seal returns nil, so retrying a seal whose
// reply was lost succeeds. Seal goes through Push's write loop: the brand
// check, the probe verdict, the retries of conflicts and the Observer
// (PushEvent.Op "seal") are the same.
func (f *Fence) Seal(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	w, err := f.prepare(opSeal, plugin, shard, writer, epoch, nil)
	if err != nil {
		return err
	}
	return f.write(ctx, w)
}

// decideSeal is decide for a seal of a sound record of the fence's
// identity, or of none: it builds the sealed record from the payload read.
func (f *Fence) decideSeal(w *recordWrite, st recorded) (done bool, err error) {
	if st.found && st.h.epoch == w.epoch && st.h.writer == w.writer {
		return true, nil
	}
	if st.found && w.epoch <= st.h.epoch {
		return false, staleEpoch(w, st.h)
	}
	w.crc = crc32Castagnoli(st.payload)
	w.header = encodeHeader(f.identity(), w.writer, w.epoch, uint64(len(st.payload)), w.crc)
	w.payload, w.record = st.payload, nil
	return false, nil
}
