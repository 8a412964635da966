//go:build (!writefence_nominio || !writefence_novalkey) && !writefence_nosdk

package writefence_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// The settle checks of the adapters whose raw access can damage a record
// in place.

// rawAccess reaches a store's objects without its adapter, as an
// operator's tool or a bug would: to damage a record in place and to see
// what the store holds.
type rawAccess struct {
	// read returns the object at key as the server holds it, and whether
	// it exists.
	read func(t *testing.T, key string) (string, bool)
	// flipLast flips the lowest bit of the object's last byte.
	flipLast func(t *testing.T, key string)
	// empty replaces the object with no bytes at all.
	empty func(t *testing.T, key string)
}

// testSettleAboveDamage: a record at epoch 100 whose last payload byte is
// damaged still shows its header, so its epoch: Inspect reports ErrCorrupt
// with epoch 100; a settle at 5 is refused as stale, writing nothing (not
// even its settle log entry); a deposed writer at 50 is refused; a settle
// at 101 lands, and then the writer at 50 is stale.
func testSettleAboveDamage(t *testing.T, store writefence.ConditionalStore, raw rawAccess) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	logKey, err := keys.SettleLog(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	cleanupKey(t, store, logKey)
	f := &writefence.Fence{Store: store, Prefix: prefix}
	require.NoError(t, f.Push(ctx, "wal", "0", "w100", 100, []byte("payload at epoch 100")))
	raw.flipLast(t, key)
	damaged, _ := raw.read(t, key)

	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, uint64(100), info.Epoch, "the header still decodes: %v", err)
	assert.Equal(t, "w100", info.Writer)
	require.NotEmpty(t, info.Version)

	unchanged := func(what string) {
		t.Helper()
		now, _ := raw.read(t, key)
		assert.Equal(t, damaged, now, "%s: the damage stands", what)
		_, _, err := store.Get(ctx, logKey)
		assert.ErrorIs(t, err, writefence.ErrNotFound, "%s: no settle was entered", what)
	}
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 5, Payload: []byte("restored at 5")})
	var se *writefence.StaleEpochError
	require.ErrorAs(t, err, &se, "a settle below the damaged record's epoch: %v", err)
	assert.Equal(t, uint64(100), se.RecordedEpoch)
	unchanged("settle at 5")
	err = (&writefence.Fence{Store: store, Prefix: prefix}).Push(ctx, "wal", "0", "w50", 50, []byte("deposed"))
	require.ErrorIs(t, err, writefence.ErrCorrupt, "a deposed writer meets the damage")
	unchanged("push at 50")

	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 101, Payload: []byte("restored at 101")}))
	epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, [3]string{"101", "op", "restored at 101"}, [3]string{strconv.FormatUint(epoch, 10), writer, string(payload)})
	err = (&writefence.Fence{Store: store, Prefix: prefix}).Push(ctx, "wal", "0", "w50", 50, []byte("deposed"))
	require.ErrorAs(t, err, &se, "the deposed writer after the settle")
	assert.Equal(t, uint64(101), se.RecordedEpoch)
}

// testSettleRepeatDamage: damage that repeats has the same version on a
// store whose version is the content's (an S3 ETag, a Valkey damaged
// version): push 5, empty the record, settle at 10 with floor 5, push 20,
// empty it again. Running the same settle again would lower the epoch from
// 20 to 10; the settle log refuses it as stale and the damage stands.
func testSettleRepeatDamage(t *testing.T, store writefence.ConditionalStore, raw rawAccess) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	logKey, err := keys.SettleLog(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	cleanupKey(t, store, logKey)
	f := &writefence.Fence{Store: store, Prefix: prefix}
	inspectDamage := func() string {
		t.Helper()
		info, err := f.Inspect(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrCorrupt)
		assert.Zero(t, info.Epoch, "nothing of the record is left to decode")
		require.NotEmpty(t, info.Version)
		return info.Version
	}

	require.NoError(t, f.Push(ctx, "wal", "0", "w", 5, []byte("five")))
	raw.empty(t, key)
	settle := writefence.Settlement{Version: inspectDamage(), Writer: "op", Epoch: 10, Payload: []byte("restored"), Floor: 5}
	require.NoError(t, f.Settle(ctx, "wal", "0", settle))
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 20, []byte("twenty")))
	raw.empty(t, key)
	require.Equal(t, settle.Version, inspectDamage(), "the same damage has the same version")

	err = f.Settle(ctx, "wal", "0", settle)
	var se *writefence.StaleEpochError
	require.ErrorAs(t, err, &se, "the old settle over new damage: %v", err)
	assert.Equal(t, uint64(10), se.RecordedEpoch, "the settle log names the settle already made")
	now, exists := raw.read(t, key)
	assert.True(t, exists)
	assert.Empty(t, now, "the damage stands")
	inspectDamage()
}
