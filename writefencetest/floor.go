package writefencetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// The floor checks: a Fence over the store, whose record something outside
// the package deletes or sets back to an earlier version's bytes, as a
// lifecycle rule, eviction or a restore from backup would.

var floorChecks = []check{
	{"Deleted", testFloorDeleted},
	{"SetBack", testFloorSetBack},
	{"Kept", testFloorKept},
	{"Check", testFloorCheck},
}

const floorPlugin, floorShard = "writefencetest", "floor"

// floorFence returns a Fence over the store under a prefix of the
// subtest's own, named, with the keys it may write tracked for cleanup,
// and the key of its record.
func floorFence(t *testing.T, sc *scope, name string, keepFloor bool) (*writefence.Fence, string) {
	t.Helper()
	f := &writefence.Fence{Store: sc.s, Prefix: sc.prefix + name + "/", KeepFloor: keepFloor}
	key, err := keys.Shard(f.Prefix, floorPlugin, floorShard)
	if err != nil {
		t.Fatalf("keys.Shard: %v", err)
	}
	floor, err := keys.Floor(f.Prefix, floorPlugin, floorShard)
	if err != nil {
		t.Fatalf("keys.Floor: %v", err)
	}
	log, err := keys.SettleLog(f.Prefix, floorPlugin, floorShard)
	if err != nil {
		t.Fatalf("keys.SettleLog: %v", err)
	}
	sc.track(key)
	sc.track(floor)
	sc.track(log)
	return f, key
}

// wantRegressed fails the test unless err is an *EpochRegressedError
// (ErrEpochRegressed, not ErrStaleEpoch) of op at epoch that saw seen and
// found found (0: no record).
func wantRegressed(t *testing.T, err error, call, op string, epoch, seen, found uint64) {
	t.Helper()
	var re *writefence.EpochRegressedError
	switch {
	case !errors.As(err, &re):
		t.Errorf("%s: %v; want a *writefence.EpochRegressedError", call, err)
	case !errors.Is(err, writefence.ErrEpochRegressed) || errors.Is(err, writefence.ErrStaleEpoch):
		t.Errorf("%s: %v; want it to match ErrEpochRegressed, and not ErrStaleEpoch", call, err)
	case re.Op != op || re.Epoch != epoch || re.Seen != seen || re.Found != found || re.Absent != (found == 0):
		t.Errorf("%s: %+v; want op %q epoch %d, seen %d, found %d", call, *re, op, epoch, seen, found)
	}
}

// get returns what the store holds at key, failing the test on an error.
func get(t *testing.T, s writefence.ConditionalStore, key string) ([]byte, string) {
	t.Helper()
	data, v, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return data, v
}

// testFloorDeleted: a Fence that sealed and pushed a shard finds its record
// deleted: its push and a seal are refused as regressed, writing nothing; a
// settle of the lost record (Settlement.Lost) above the floor the operator
// asserts writes it afresh, and writes above it land again.
func testFloorDeleted(t *testing.T, sc *scope) {
	d := deleter(t, sc)
	ctx := t.Context()
	f, key := floorFence(t, sc, "deleted", false)
	must(t, "Seal", f.Seal(ctx, floorPlugin, floorShard, "writer one", 1<<32|1))
	must(t, "Push", f.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|2, []byte("two")))
	if err := d.Delete(ctx, key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}

	err := f.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|3, []byte("three"))
	wantRegressed(t, err, "Push over the deleted record", "push", 1<<32|3, 1<<32|2, 0)
	err = f.Seal(ctx, floorPlugin, floorShard, "writer two", 2<<32|1)
	wantRegressed(t, err, "Seal over the deleted record", "seal", 2<<32|1, 1<<32|2, 0)
	wantMissing(t, sc.s, key)

	must(t, "Settle with Lost", f.Settle(ctx, floorPlugin, floorShard, writefence.Settlement{
		Lost: true, Writer: "operator", Floor: 2<<32 - 1, Epoch: 2 << 32, Payload: []byte("settled")}))
	must(t, "Seal after the settle", f.Seal(ctx, floorPlugin, floorShard, "writer two", 2<<32|1))
	err = f.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|3, []byte("three"))
	wantOnly(t, err, "Push of the deposed writer after the settle", "writefence.ErrStaleEpoch", writefence.ErrStaleEpoch, writefence.ErrEpochRegressed)
}

// testFloorSetBack: the record is set back to an earlier version's bytes,
// as a restore from backup would: the Fence that wrote the later one, and
// one that only read it, refuse to write it, and Check refuses too; the
// store keeps the restored bytes. A Fence told to forget the shard writes
// over them.
func testFloorSetBack(t *testing.T, sc *scope) {
	ctx := t.Context()
	f, key := floorFence(t, sc, "setback", false)
	reader := &writefence.Fence{Store: sc.s, Prefix: f.Prefix}
	must(t, "Seal", f.Seal(ctx, floorPlugin, floorShard, "writer one", 1<<32|1))
	sealed, _ := get(t, sc.s, key)
	must(t, "Push", f.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|2, []byte("two")))
	if _, _, _, err := reader.Latest(ctx, floorPlugin, floorShard); err != nil {
		t.Fatalf("Latest: %v", err)
	}
	_, v := get(t, sc.s, key)
	restored := put(t, sc.s, key, sealed, v)

	err := f.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|3, []byte("three"))
	wantRegressed(t, err, "Push over the record set back", "push", 1<<32|3, 1<<32|2, 1<<32|1)
	err = reader.Update(ctx, floorPlugin, floorShard, "writer one", 1<<32|3, func(cur []byte) ([]byte, error) { return cur, nil })
	wantRegressed(t, err, "Update by a Fence that read the later record", "update", 1<<32|3, 1<<32|2, 1<<32|1)
	err = f.Check(ctx, floorPlugin, floorShard, "writer one", 1<<32|1)
	wantRegressed(t, err, "Check of the sealed epoch over the record set back", "check", 1<<32|1, 1<<32|2, 1<<32|1)
	wantContent(t, sc.s, key, sealed, restored)

	if err := reader.Forget(floorPlugin, floorShard); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	must(t, "Push after Forget", reader.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|3, []byte("three")))
}

// testFloorKept: under KeepFloor a push cannot create a shard's record; a
// seal does and keeps its floor apart from the record; a Fence that never
// saw the shard then refuses to write the record set back below that floor,
// or deleted, and a settle of the lost record lands above it.
func testFloorKept(t *testing.T, sc *scope) {
	ctx := t.Context()
	plain, key := floorFence(t, sc, "kept", false)
	f := &writefence.Fence{Store: sc.s, Prefix: plain.Prefix, KeepFloor: true}
	err := f.Push(ctx, floorPlugin, floorShard, "writer one", 1, []byte("one"))
	wantOnly(t, err, "Push under KeepFloor of a shard never sealed", "writefence.ErrNotFound", writefence.ErrNotFound, writefence.ErrEpochRegressed)

	// A record written before the floor was kept, then a takeover's seal.
	must(t, "Push without KeepFloor", plain.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|1, []byte("one")))
	early, _ := get(t, sc.s, key)
	must(t, "Seal under KeepFloor", f.Seal(ctx, floorPlugin, floorShard, "writer two", 2<<32|1))
	must(t, "Push under KeepFloor", f.Push(ctx, floorPlugin, floorShard, "writer two", 2<<32|2, []byte("two")))
	_, v := get(t, sc.s, key)
	restored := put(t, sc.s, key, early, v)

	fresh := &writefence.Fence{Store: sc.s, Prefix: plain.Prefix, KeepFloor: true}
	err = fresh.Push(ctx, floorPlugin, floorShard, "writer one", 1<<32|2, []byte("zombie"))
	wantRegressed(t, err, "a zombie's Push over the record set back below the floor", "push", 1<<32|2, 2<<32|1, 1<<32|1)
	err = fresh.Seal(ctx, floorPlugin, floorShard, "writer three", 3<<32|1)
	wantRegressed(t, err, "Seal over the record set back below the floor", "seal", 3<<32|1, 2<<32|1, 1<<32|1)
	wantContent(t, sc.s, key, early, restored)

	if d, ok := sc.s.(writefence.Deleter); ok {
		if err := d.Delete(ctx, key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		err = fresh.Seal(ctx, floorPlugin, floorShard, "writer three", 3<<32|1)
		wantRegressed(t, err, "Seal over the deleted record", "seal", 3<<32|1, 2<<32|1, 0)
		wantMissing(t, sc.s, key)
		restored = ""
	}

	must(t, "Settle with Lost under KeepFloor", fresh.Settle(ctx, floorPlugin, floorShard, writefence.Settlement{
		Version: restored, Lost: true, Writer: "operator", Floor: 3<<32 - 1, Epoch: 3 << 32, Payload: []byte("settled")}))
	must(t, "Seal after the settle", fresh.Seal(ctx, floorPlugin, floorShard, "writer three", 3<<32|1))
	must(t, "Push after the settle", fresh.Push(ctx, floorPlugin, floorShard, "writer three", 3<<32|2, []byte("three")))
}

// testFloorCheck: Check before and after a takeover.
func testFloorCheck(t *testing.T, sc *scope) {
	ctx := t.Context()
	a, _ := floorFence(t, sc, "check", false)
	b := &writefence.Fence{Store: sc.s, Prefix: a.Prefix}
	must(t, "Seal", a.Seal(ctx, floorPlugin, floorShard, "writer one", 1<<32|1))
	must(t, "Commit", a.Commit(ctx, floorPlugin, floorShard, "writer one", 1<<32|3, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Payload = []byte("manifest")
		return m, nil
	}))
	for _, e := range []uint64{1<<32 | 1, 1<<32 | 2, 1<<32 | 3} {
		must(t, fmt.Sprintf("Check of epoch %d within the tenure", e), a.Check(ctx, floorPlugin, floorShard, "writer one", e))
	}
	err := a.Check(ctx, floorPlugin, floorShard, "writer two", 1<<32|3)
	wantOnly(t, err, "Check of another writer", "writefence.ErrStaleEpoch", writefence.ErrStaleEpoch)

	must(t, "Seal of the takeover", b.Seal(ctx, floorPlugin, floorShard, "writer two", 2<<32|1))
	err = a.Check(ctx, floorPlugin, floorShard, "writer one", 1<<32|3)
	var se *writefence.StaleEpochError
	if !errors.As(err, &se) || se.RecordedEpoch != 2<<32|1 || se.RecordedWriter != "writer two" {
		t.Errorf("Check after the takeover: %v; want a *writefence.StaleEpochError naming epoch %d by %q", err, uint64(2<<32|1), "writer two")
	}
	must(t, "Check of the new writer", b.Check(ctx, floorPlugin, floorShard, "writer two", 2<<32|1))
	errs := a.CheckAll(ctx, []writefence.Tenure{
		{Plugin: floorPlugin, Shard: floorShard, Writer: "writer one", Epoch: 1<<32 | 3},
		{Plugin: floorPlugin, Shard: floorShard, Writer: "writer two", Epoch: 2<<32 | 1},
	})
	if len(errs) != 2 || !errors.Is(errs[0], writefence.ErrStaleEpoch) || errs[1] != nil {
		t.Errorf("CheckAll of the old and the new writer: %v; want [stale, nil]", errs)
	}
}

// must fails the test now unless err is nil.
func must(t *testing.T, call string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
}
