package writefencetest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// The checks of a Fence's settle over a record damaged from outside the
// store (Options.Damage): what an operator does with a corrupt record, on
// the store's own answers to damage (damage in place, reported as a
// *writefence.CorruptError, or an overwrite under a new version).

// settleRun is a Fence's shard on the store under a subtest's prefix, for
// the settle checks.
type settleRun struct {
	t      *testing.T
	sc     *scope
	f      *writefence.Fence
	key    string // the shard's record
	logKey string // the shard's settle log
}

const settlePlugin, settleShard = "writefencetest", "settle"

// newSettleRun returns a Fence on the store and its shard's keys, or skips
// the test when the kit cannot damage the store.
func newSettleRun(t *testing.T, sc *scope) *settleRun {
	t.Helper()
	if sc.opts.Damage == nil {
		t.Skip("Options.Damage is not set: the suite cannot damage the store from outside")
	}
	prefix := sc.prefix + "settle/"
	key, err := keys.Shard(prefix, settlePlugin, settleShard)
	if err != nil {
		t.Fatalf("keys.Shard: %v", err)
	}
	logKey, err := keys.SettleLog(prefix, settlePlugin, settleShard)
	if err != nil {
		t.Fatalf("keys.SettleLog: %v", err)
	}
	return &settleRun{t: t, sc: sc, f: &writefence.Fence{Store: sc.s, Prefix: prefix}, key: sc.track(key), logKey: sc.track(logKey)}
}

// damage does f to the shard's record.
func (r *settleRun) damage(f Fault) {
	r.t.Helper()
	if err := r.sc.opts.Damage(r.t.Context(), r.key, f); err != nil {
		r.t.Fatalf("Options.Damage(%q, %+v): %v", r.key, f, err)
	}
}

// state describes what Get reports of the shard's record: the bytes and
// version, or the version and head of a *writefence.CorruptError.
func (r *settleRun) state() string {
	r.t.Helper()
	data, v, err := r.sc.s.Get(r.t.Context(), r.key)
	var ce *writefence.CorruptError
	switch {
	case err == nil:
		return fmt.Sprintf("bytes %s, version %q", hex.EncodeToString(data), v)
	case errors.As(err, &ce):
		return fmt.Sprintf("a *writefence.CorruptError, version %q, head %s", ce.Version, hex.EncodeToString(ce.Head))
	}
	r.t.Fatalf("Get(%q) of the damaged record: %v", r.key, err)
	return ""
}

// inspect returns what Inspect reports of the damaged record, failing the
// test unless it reports damage with a version.
func (r *settleRun) inspect() writefence.RecordInfo {
	r.t.Helper()
	info, err := r.f.Inspect(r.t.Context(), settlePlugin, settleShard)
	if !errors.Is(err, writefence.ErrCorrupt) {
		r.t.Fatalf("Inspect of the damaged record: %+v, %v; want an error matching writefence.ErrCorrupt", info, err)
	}
	if info.Version == "" {
		r.t.Fatalf("Inspect of the damaged record: %v, with no version: nothing could settle it", err)
	}
	return info
}

// unchanged fails the test unless the record is as was, damage included,
// and no settle was entered in the shard's settle log.
func (r *settleRun) unchanged(was, what string) {
	r.t.Helper()
	if now := r.state(); now != was {
		r.t.Errorf("after %s the record is %s; want %s: the damage must stand", what, now, was)
	}
	_, _, err := r.sc.s.Get(r.t.Context(), r.logKey)
	if !errors.Is(err, writefence.ErrNotFound) {
		r.t.Errorf("after %s, Get(%q), the settle log: %v; want an error matching writefence.ErrNotFound: no settle was entered", what, r.logKey, err)
	}
}

// wantStale fails the test unless err is a *writefence.StaleEpochError
// recording epoch.
func wantStale(t *testing.T, err error, call string, epoch uint64) {
	t.Helper()
	var se *writefence.StaleEpochError
	switch {
	case !errors.As(err, &se):
		t.Errorf("%s: %v; want a *writefence.StaleEpochError", call, err)
	case se.RecordedEpoch != epoch:
		t.Errorf("%s: %v; want it refused by epoch %d", call, err, epoch)
	}
}

// testSettleAboveDamage damages the last payload byte of a record at epoch
// 100, which leaves its header, so its epoch, readable: Inspect reports
// ErrCorrupt at epoch 100; a settle at 5 is refused as stale, writing
// nothing (not even its settle log entry); a deposed writer's push at 50
// meets the damage; a settle at 101 lands, and then the push at 50 is
// stale.
func testSettleAboveDamage(t *testing.T, sc *scope) {
	r := newSettleRun(t, sc)
	ctx := t.Context()
	if err := r.f.Push(ctx, settlePlugin, settleShard, "w100", 100, []byte("payload at epoch 100")); err != nil {
		t.Fatalf("Push at 100: %v", err)
	}
	r.damage(Fault{Flip: -1})
	damaged := r.state()
	info := r.inspect()
	if info.Epoch != 100 || info.Writer != "w100" {
		t.Fatalf("Inspect of a record whose last payload byte is damaged reported epoch %d by %q; want epoch 100 by %q: the header is intact, and a store's *writefence.CorruptError must carry the damaged bytes' head (Head) for a Fence to read it", info.Epoch, info.Writer, "w100")
	}

	err := r.f.Settle(ctx, settlePlugin, settleShard, writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 5, Payload: []byte("restored at 5")})
	wantStale(t, err, "Settle at 5 of a damaged record at 100", 100)
	r.unchanged(damaged, "a settle at 5")
	deposed := &writefence.Fence{Store: sc.s, Prefix: r.f.Prefix}
	err = deposed.Push(ctx, settlePlugin, settleShard, "w50", 50, []byte("deposed"))
	if !errors.Is(err, writefence.ErrCorrupt) {
		t.Errorf("Push at 50 over the damaged record at 100: %v; want an error matching writefence.ErrCorrupt", err)
	}
	r.unchanged(damaged, "a push at 50")

	if err := r.f.Settle(ctx, settlePlugin, settleShard, writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 101, Payload: []byte("restored at 101")}); err != nil {
		t.Fatalf("Settle at 101 of the damaged record at 100: %v", err)
	}
	epoch, writer, payload, err := r.f.Latest(ctx, settlePlugin, settleShard)
	if err != nil || epoch != 101 || writer != "op" || string(payload) != "restored at 101" {
		t.Errorf("Latest after the settle: epoch %d by %q, %q, %v; want epoch 101 by %q, %q", epoch, writer, payload, err, "op", "restored at 101")
	}
	err = deposed.Push(ctx, settlePlugin, settleShard, "w50", 50, []byte("deposed"))
	wantStale(t, err, "Push at 50 after the settle at 101", 101)
}

// testSettleRepeatDamage damages a record twice the same way, around a
// settle: push 5, empty the record, settle at 10 with floor 5, push 20,
// empty it again. On a store whose version of damage is the damaged
// content's (an S3 ETag, a digest), the second damage has the first's
// version, and running the same settle again would lower the epoch from 20
// to 10: the settle log refuses it as stale. On a store that gives the
// second damage a version of its own, the old settle no longer names the
// record, and is refused. Either way the damage stands.
func testSettleRepeatDamage(t *testing.T, sc *scope) {
	r := newSettleRun(t, sc)
	ctx := t.Context()
	inspectEmpty := func() string {
		t.Helper()
		info := r.inspect()
		if info.Epoch != 0 {
			t.Errorf("Inspect of an emptied record reported epoch %d; want 0: nothing of it is left to decode", info.Epoch)
		}
		return info.Version
	}
	if err := r.f.Push(ctx, settlePlugin, settleShard, "w", 5, []byte("five")); err != nil {
		t.Fatalf("Push at 5: %v", err)
	}
	r.damage(Fault{Empty: true})
	settle := writefence.Settlement{Version: inspectEmpty(), Writer: "op", Epoch: 10, Payload: []byte("restored"), Floor: 5}
	if err := r.f.Settle(ctx, settlePlugin, settleShard, settle); err != nil {
		t.Fatalf("Settle at 10 of the emptied record: %v", err)
	}
	if err := r.f.Push(ctx, settlePlugin, settleShard, "w", 20, []byte("twenty")); err != nil {
		t.Fatalf("Push at 20 after the settle: %v", err)
	}
	r.damage(Fault{Empty: true})
	damaged := r.state()
	again := inspectEmpty()

	err := r.f.Settle(ctx, settlePlugin, settleShard, settle)
	call := "the settle at 10 run again over the record at 20, emptied again"
	if again == settle.Version {
		t.Logf("the second damage has the first's version %q: the settle log must refuse the settle", again)
		wantStale(t, err, call, 10)
	} else {
		t.Logf("the second damage has a version of its own, %q, not the first's %q", again, settle.Version)
		if err == nil {
			t.Errorf("%s landed", call)
		}
	}
	if now := r.state(); now != damaged {
		t.Errorf("after %s the record is %s; want %s: the damage must stand", call, now, damaged)
	}
	if info := r.inspect(); info.Version != again {
		t.Errorf("Inspect after %s reports version %q; want %q, the damage's", call, info.Version, again)
	}
}
