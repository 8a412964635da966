package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// corruptRecord pushes a record to a fresh directory store, then replaces
// it with a truncated copy, and returns the address and the corrupt
// record's version.
func corruptRecord(t *testing.T) (addr, version string) {
	t.Helper()
	addr = fileStore(t)
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "5", "-file", writeFile(t, "good payload"), "wal", "s").code)
	ds, err := writefence.NewDirConditionalStore(strings.TrimPrefix(addr, "file://"), nil)
	require.NoError(t, err)
	ctx := context.Background()
	data, v, err := ds.Get(ctx, "writefence/s/wal/s")
	require.NoError(t, err)
	version, err = ds.PutIfVersion(ctx, "writefence/s/wal/s", data[:len(data)-3], v)
	require.NoError(t, err)
	return addr, version
}

func TestLatestCorrupt(t *testing.T) {
	addr, version := corruptRecord(t)
	r := wf(t, "latest", "-store", addr, "wal", "s")
	assert.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: corrupt record: truncated payload")
	assert.Contains(t, r.stderr, "writefence settle -store "+addr+" -confirm-version "+version+" ")

	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	assert.Equal(t, exitCorrupt, r.code)
	m := jsonOf(t, r)
	assert.Equal(t, "corrupt", m["outcome"])
	assert.Equal(t, "truncated payload", m["check"])
	assert.Equal(t, version, m["version"])

	r = wf(t, "push", "-store", addr, "-writer", "b", "-epoch", "9", "-file", writeFile(t, "x"), "wal", "s")
	assert.Equal(t, exitCorrupt, r.code, "the fence never overwrites a corrupt record: %s", r)
}

// TestLatestCorruptHeader: a corrupt record whose header decodes is shown
// with the epoch and writer the header claims.
func TestLatestCorruptHeader(t *testing.T) {
	addr, version := corruptRecord(t) // the payload is cut short; the header is intact
	r := wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Contains(t, r.stdout, "epoch     5\n")
	assert.Contains(t, r.stdout, "writer    a\n")
	assert.Contains(t, r.stdout, "version   "+version+"\n")
	assert.Contains(t, r.stderr, "claims epoch 5 by a")
	assert.Contains(t, r.stderr, "to overwrite it: writefence settle -store "+addr+" -confirm-version "+version+" -writer W -epoch 6 -file F wal s\n",
		"the settle line asks for an epoch above the header's")
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	m := jsonOf(t, r)
	assert.EqualValues(t, 5, m["epoch"])
	assert.Equal(t, "a", m["writer"])
	assert.Equal(t, "truncated payload", m["check"])
	assert.Equal(t, "writefence settle -store "+addr+" -confirm-version "+version+" -writer W -epoch 6 -file F wal s", m["settle"])
}

// TestLatestDamagedFile: a directory store's file damaged on disk is shown
// by latest with its damaged version and the settle line to run, which
// replaces it.
func TestLatestDamagedFile(t *testing.T) {
	addr := fileStore(t)
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "5", "-file", writeFile(t, "good payload"), "wal", "s").code)
	key, err := keys.Shard("", "wal", "s")
	require.NoError(t, err)
	dir := strings.TrimPrefix(addr, "file://")
	files, err := filepath.Glob(filepath.Join(dir, "objects", "*"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one record")
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	b[len(b)-6] ^= 0x20 // in the payload; the token inside the file stays
	require.NoError(t, os.WriteFile(files[0], b, 0o600))

	r := wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	m := regexp.MustCompile(`to overwrite it: writefence (settle .*)\n`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "a settle line: %s", r)
	assert.Regexp(t, `\nversion +damaged-[0-9a-f]{64}\n`, r.stdout)
	assert.Regexp(t, `^key +`+regexp.QuoteMeta(key)+`\n`, r.stdout)
	// The store's own check found the damage, after the record's header:
	// the header still decodes, so the line settles above its epoch.
	assert.Contains(t, r.stdout, "\nepoch     5\n")
	assert.Contains(t, r.stderr, "claims epoch 5 by a")
	assert.Contains(t, m[1], " -epoch 6 ")

	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code)
	j := jsonOf(t, r)
	version := j["version"].(string)
	assert.True(t, strings.HasPrefix(version, "damaged-"), version)
	assert.Contains(t, m[1], "-confirm-version "+version+" ")
	assert.EqualValues(t, 5, j["epoch"])
	assert.Equal(t, "writefence "+m[1], j["settle"], "-json carries the same line")

	r = wf(t, "push", "-store", addr, "-writer", "b", "-epoch", "9", "-file", writeFile(t, "x"), "wal", "s")
	assert.Equal(t, exitCorrupt, r.code, "a push never overwrites it: %s", r)

	// Run the suggested line, with the placeholders filled in.
	line := strings.NewReplacer("-writer W", "-writer operator", "-file F", "-file "+writeFile(t, "rebuilt")).Replace(m[1])
	r = wf(t, strings.Fields(line)...)
	require.Equal(t, exitOK, r.code, "%s: %s", line, r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 6, jsonOf(t, r)["epoch"])
}

func TestSettle(t *testing.T) {
	addr, version := corruptRecord(t)
	fresh := writeFile(t, "rebuilt")
	settle := func(extra ...string) result {
		return wf(t, append([]string{"settle", "-store", addr, "-writer", "operator", "-file", fresh}, append(extra, "wal", "s")...)...)
	}

	r := settle("-epoch", "100")
	assert.Equal(t, exitUsage, r.code, "no confirmation: %s", r)
	r = settle("-epoch", "100", "-confirm-version", "not-"+version)
	assert.Equal(t, exitConflict, r.code, "another version: %s", r)
	assert.Contains(t, r.stderr, "is at version "+version+", not not-"+version)
	r = settle("-epoch", "5", "-confirm-version", version)
	assert.Equal(t, exitStale, r.code, "not above the header's epoch: %s", r)
	assert.Equal(t, exitCorrupt, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")

	r = settle("-json", "-epoch", "100", "-confirm-version", version)
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "ok", m["outcome"])
	assert.Equal(t, version, m["replaced"])
	assert.EqualValues(t, 100, m["epoch"])
	settled := m["version"]
	assert.NotEmpty(t, settled)

	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	m = jsonOf(t, r)
	assert.EqualValues(t, 100, m["epoch"])
	assert.Equal(t, "operator", m["writer"])
	assert.EqualValues(t, len("rebuilt"), m["size"])
	assert.Equal(t, settled, m["version"])

	// The same settle again finds its own record (as a retry after a lost
	// answer would) and writes nothing; any other settle is refused, for
	// the record is sound. The fence admits pushes above the operator's
	// epoch again.
	r = settle("-epoch", "100", "-confirm-version", version)
	assert.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, settled, jsonOf(t, wf(t, "latest", "-json", "-store", addr, "wal", "s"))["version"], "nothing was written")
	r = settle("-epoch", "101", "-confirm-version", version)
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "not corrupt")
	assert.Equal(t, exitStale, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "99", "-file", fresh, "wal", "s").code)
	assert.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "101", "-file", fresh, "wal", "s").code)
}

// recordFile returns the file of (plugin, shard)'s record in the directory
// store at addr: objects/ and the SHA-256 of the key, as
// DirConditionalStore documents its layout.
func recordFile(t *testing.T, addr, plugin, shard string) string {
	t.Helper()
	key, err := keys.Shard("", plugin, shard)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(key))
	p := filepath.Join(strings.TrimPrefix(addr, "file://"), "objects", hex.EncodeToString(sum[:]))
	require.FileExists(t, p)
	return p
}

// TestSettleFloor: a record whose file is cut to nothing keeps no header,
// so the store holds no epoch to stay above. latest prints a settle line
// that asks for -floor; settle without it is refused, naming what to
// state, and so is an -epoch not above it; with both it lands.
func TestSettleFloor(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "good payload")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "5", "-file", p, "wal", "s").code)
	require.NoError(t, os.Truncate(recordFile(t, addr, "wal", "s"), 0))

	r := wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.NotRegexp(t, `\nepoch `, r.stdout, "no epoch is shown: none can be read")
	assert.Contains(t, r.stderr, "not even its header can be read")
	assert.Contains(t, r.stderr, "the highest epoch ever granted for the shard")
	m := regexp.MustCompile(`to overwrite it: writefence (settle .*)\n`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "a settle line: %s", r)
	assert.Contains(t, m[1], " -writer W -floor GRANTED -epoch E -file F wal s")
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Equal(t, "writefence "+m[1], jsonOf(t, r)["settle"])

	line := strings.NewReplacer("-writer W", "-writer operator", "-file F", "-file "+p).Replace(m[1])
	run := func(line string) result { return wf(t, strings.Fields(line)...) }
	r = run(strings.Replace(line, "-floor GRANTED -epoch E", "-epoch 10", 1))
	assert.Equal(t, exitUsage, r.code, "no -floor: %s", r)
	assert.Contains(t, r.stderr, "pass -floor with the highest epoch ever granted for the shard")
	settle := func(floor, epoch string) result {
		return run(strings.Replace(line, "-floor GRANTED -epoch E", "-floor "+floor+" -epoch "+epoch, 1))
	}
	r = settle("5", "5")
	assert.Equal(t, exitUsage, r.code, "-epoch not above -floor: %s", r)
	assert.Contains(t, r.stderr, "-epoch 5 is not above -floor 5")
	assert.Equal(t, exitCorrupt, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")

	r = settle("5", "10")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 10, jsonOf(t, r)["epoch"])

	help := strings.Join(strings.Fields(wf(t, "help", "settle").stdout), " ")
	assert.Contains(t, help, "-floor is then required, the highest epoch ever granted for the shard")
}

// TestSettleRerunRefused: damaged bytes repeat (a file cut to nothing has
// the same damaged version every time), so an old settle line run again
// over new damage would replace a later writer's record with an older
// epoch. The settle log refuses it: stale, and nothing is written.
func TestSettleRerunRefused(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "good payload")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "5", "-file", p, "wal", "s").code)
	file := recordFile(t, addr, "wal", "s")
	require.NoError(t, os.Truncate(file, 0))
	r := wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	version := jsonOf(t, r)["version"].(string)
	settle := []string{"settle", "-store", addr, "-confirm-version", version, "-writer", "operator", "-floor", "5", "-epoch", "10", "-file", p, "wal", "s"}
	r = wf(t, settle...)
	require.Equal(t, exitOK, r.code, "%s", r)

	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "b", "-epoch", "20", "-file", p, "wal", "s").code)
	require.NoError(t, os.Truncate(file, 0))
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	require.Equal(t, version, jsonOf(t, r)["version"], "the same damage, the same version")

	r = wf(t, settle...)
	assert.Equal(t, exitStale, r.code, "the same settle again: %s", r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	assert.Equal(t, exitCorrupt, r.code, "still the damage, not a record at epoch 10: %s", r)
	assert.Equal(t, version, jsonOf(t, r)["version"])

	// A settle above every epoch granted since lands.
	r = wf(t, "settle", "-store", addr, "-confirm-version", version, "-writer", "operator", "-floor", "20", "-epoch", "21", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 21, jsonOf(t, r)["epoch"])
}

func TestSettleRefusals(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	args := []string{"settle", "-store", addr, "-confirm-version", "1", "-writer", "op", "-epoch", "2", "-file", p, "wal", "s"}
	assert.Equal(t, exitNotFound, wf(t, args...).code, "nothing to settle")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-identity", "other/v2", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	r := wf(t, args...)
	assert.Equal(t, exitError, r.code, "a foreign record is not corrupt: %s", r)
	assert.Contains(t, r.stderr, "not corrupt")
}

// TestSettleLost: a record deleted or set back outside the fence is settled
// with -lost, on the version found now (none when it is gone), at an epoch
// above -floor, which -lost requires; a record that decodes is refused
// without -lost, and a damaged one with it.
func TestSettleLost(t *testing.T) {
	addr := fileStore(t)
	dir := strings.TrimPrefix(addr, "file://")
	push := func(epoch string) {
		t.Helper()
		require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", epoch, "-file", writeFile(t, "p"+epoch), "wal", "s").code)
	}
	ds, err := writefence.NewDirConditionalStore(dir, nil)
	require.NoError(t, err)
	ctx := context.Background()
	const key = "writefence/s/wal/s"
	good := writeFile(t, "restored")

	push("5")
	old, _, err := ds.Get(ctx, key)
	require.NoError(t, err)
	push("7")

	// Set back: the record holds epoch 5 again, as a restore would leave it.
	_, v, err := ds.Get(ctx, key)
	require.NoError(t, err)
	back, err := ds.PutIfVersion(ctx, key, old, v)
	require.NoError(t, err)

	r := wf(t, "settle", "-store", addr, "-lost", "-confirm-version", back, "-writer", "operator", "-epoch", "8", "-file", good, "wal", "s")
	assert.Equal(t, exitUsage, r.code, "-lost needs -floor: %s", r)
	assert.Contains(t, r.stderr, "-lost needs -floor")
	r = wf(t, "settle", "-store", addr, "-confirm-version", back, "-writer", "operator", "-floor", "7", "-epoch", "8", "-file", good, "wal", "s")
	assert.Equal(t, exitError, r.code, "without -lost a record that decodes is not settled: %s", r)
	r = wf(t, "settle", "-store", addr, "-lost", "-confirm-version", back, "-writer", "operator", "-floor", "7", "-epoch", "7", "-file", good, "wal", "s")
	assert.Equal(t, exitUsage, r.code, "-epoch must be above -floor: %s", r)

	r = wf(t, "settle", "-store", addr, "-lost", "-confirm-version", back, "-writer", "operator", "-floor", "7", "-epoch", "8", "-file", good, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "settled: writefence/s/wal/s: set-back version "+back+" replaced by epoch 8 by operator")
	latest := wf(t, "latest", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, latest.code, "%s", latest)
	assert.Contains(t, latest.stdout, "epoch     8\n")

	// Gone: the record's file removed, as a lifecycle rule or an rm would.
	require.NoError(t, ds.(writefence.Deleter).Delete(ctx, key))
	r = wf(t, "settle", "-store", addr, "-lost", "-writer", "operator", "-floor", "8", "-epoch", "9", "-file", good, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "settled: writefence/s/wal/s: lost record replaced by epoch 9 by operator")
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "8", "-file", writeFile(t, "zombie"), "wal", "s")
	assert.Equal(t, exitStale, r.code, "a zombie at the old epoch is refused after the settle: %s", r)

	// Damaged: -lost refuses, the damage is settled without it.
	_, v, err = ds.Get(ctx, key)
	require.NoError(t, err)
	data, _, err := ds.Get(ctx, key)
	require.NoError(t, err)
	damaged, err := ds.PutIfVersion(ctx, key, data[:len(data)-2], v)
	require.NoError(t, err)
	r = wf(t, "settle", "-store", addr, "-lost", "-confirm-version", damaged, "-writer", "operator", "-floor", "9", "-epoch", "10", "-file", good, "wal", "s")
	assert.Equal(t, exitUsage, r.code, "a damaged record is settled without -lost: %s", r)
}

// TestRegressedStatus: an error matching ErrEpochRegressed (a record seen
// before found gone or lower) exits 12 with the outcome "regressed", ahead
// of the lease loss it may also be.
func TestRegressedStatus(t *testing.T) {
	for _, err := range []error{
		&writefence.EpochRegressedError{Op: "push", Key: "k", Epoch: 3},
		&writefence.LeaseLostError{Name: "wal", Term: 3},
	} {
		code, name := classify(err)
		assert.Equal(t, exitRegressed, code, "%v", err)
		assert.Equal(t, "regressed", name)
	}
	f := newFailure(&writefence.EpochRegressedError{Op: "push", Key: "k", Epoch: 9, Seen: 7, SeenWriter: "b", Found: 5, FoundWriter: "a"})
	assert.Equal(t, failure{Outcome: "regressed", Error: f.Error, Key: "k", Epoch: 9, SeenEpoch: 7, SeenWriter: "b", RecordedEpoch: 5, RecordedWriter: "a"}, f,
		"-json names what was seen, the -floor of settle -lost, and what is found")
	f = newFailure(&writefence.EpochRegressedError{Op: "push", Key: "k", Epoch: 9, Seen: 7, SeenWriter: "b", Absent: true})
	assert.True(t, f.Absent)
	assert.EqualValues(t, 7, f.SeenEpoch)
}

// TestSettleLostKeepsFloor: settle -lost on a shard whose writers keep its
// floor (Fence.KeepFloor) does what Fence.Settle does under KeepFloor: it
// refuses an epoch not above the floor (exit 4, naming the floor's key),
// which would leave a record every such writer refuses, and raises the
// floor to the settle's epoch, so that a record set back below the settle
// is refused by a writer that never saw it.
func TestSettleLostKeepsFloor(t *testing.T) {
	addr := fileStore(t)
	ds, err := writefence.NewDirConditionalStore(strings.TrimPrefix(addr, "file://"), nil)
	require.NoError(t, err)
	ctx := context.Background()
	const key = "writefence/s/wal/s"
	floorKey, err := keys.Floor("", "wal", "s")
	require.NoError(t, err)
	good := writeFile(t, "restored")

	f := &writefence.Fence{Store: ds, KeepFloor: true}
	require.NoError(t, f.Seal(ctx, "wal", "s", "a", 1<<32|1))
	require.NoError(t, f.Push(ctx, "wal", "s", "a", 1<<32|2, []byte("a2")))
	a2, _, err := ds.Get(ctx, key)
	require.NoError(t, err)
	require.NoError(t, f.Seal(ctx, "wal", "s", "b", 2<<32|1))
	require.NoError(t, f.Push(ctx, "wal", "s", "b", 2<<32|2, []byte("b2")))
	b2, _, err := ds.Get(ctx, key)
	require.NoError(t, err)
	require.NoError(t, ds.(writefence.Deleter).Delete(ctx, key))

	// Below the floor: refused, nothing written.
	r := wf(t, "settle", "-store", addr, "-lost", "-writer", "operator", "-floor", "1", "-epoch", "2", "-file", good, "wal", "s")
	assert.Equal(t, exitStale, r.code, "a settle not above the floor: %s", r)
	assert.Contains(t, r.stderr, floorKey)
	_, _, err = ds.Get(ctx, key)
	require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written")

	// Above it: the floor rises to the settle's epoch.
	r = wf(t, "settle", "-store", addr, "-lost", "-writer", "operator", "-floor", strconv.FormatUint(3<<32-1, 10),
		"-epoch", strconv.FormatUint(3<<32, 10), "-file", good, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	for _, back := range [][]byte{a2, b2} {
		_, v, err := ds.Get(ctx, key)
		require.NoError(t, err)
		_, err = ds.PutIfVersion(ctx, key, back, v)
		require.NoError(t, err)
		fresh := &writefence.Fence{Store: ds, KeepFloor: true}
		err = fresh.Push(ctx, "wal", "s", "b", 2<<32|3, []byte("zombie"))
		require.ErrorIs(t, err, writefence.ErrEpochRegressed, "a record set back below the settle")
	}
}
