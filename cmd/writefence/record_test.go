package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
)

// TestPushLatest walks a shard through the outcomes push and latest
// report, asserting each exit status and the -json form.
func TestPushLatest(t *testing.T) {
	addr := fileStore(t)
	seg := writeFile(t, "segment 0001")

	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "node-a", "-epoch", "1", "-file", seg, "wal", "other").code)
	r := wf(t, "latest", "-store", addr, "wal", "shard-0")
	assert.Equal(t, exitNotFound, r.code, "%s", r)
	r = wf(t, "latest", "-store", addr, "-json", "wal", "shard-0")
	assert.Equal(t, exitNotFound, r.code, "%s", r)
	assert.Equal(t, "not_found", jsonOf(t, r)["outcome"])

	r = wf(t, "push", "-store", addr, "-writer", "node-a", "-epoch", "7", "-file", seg, "wal", "shard-0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "landed: writefence/s/wal/shard-0 epoch 7 by node-a, 12 bytes")

	r = wf(t, "latest", "-store", addr, "wal", "shard-0")
	require.Equal(t, exitOK, r.code, "%s", r)
	for _, line := range []string{"epoch     7", "writer    node-a", "identity  " + defaults.Identity, "size      12", "key       writefence/s/wal/shard-0"} {
		assert.Contains(t, r.stdout, line+"\n")
	}
	r = wf(t, "latest", "-store", addr, "-json", "wal", "shard-0")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "ok", m["outcome"])
	assert.EqualValues(t, 7, m["epoch"])
	assert.Equal(t, "node-a", m["writer"])
	assert.EqualValues(t, 12, m["size"])
	version := m["version"].(string)

	// The version is the store's own token for the record.
	ds, err := writefence.NewDirConditionalStore(strings.TrimPrefix(addr, "file://"), nil)
	require.NoError(t, err)
	_, v, err := ds.Get(context.Background(), "writefence/s/wal/shard-0")
	require.NoError(t, err)
	assert.Equal(t, v, version)

	// A zombie at a lower or equal epoch is refused, naming the recorded one.
	for _, epoch := range []string{"6", "7"} {
		r = wf(t, "push", "-store", addr, "-json", "-writer", "zombie", "-epoch", epoch, "-file", seg, "wal", "shard-0")
		assert.Equal(t, exitStale, r.code, "%s", r)
		m = jsonOf(t, r)
		assert.Equal(t, "stale", m["outcome"])
		assert.EqualValues(t, 7, m["recorded_epoch"])
		assert.Equal(t, "node-a", m["recorded_writer"])
		assert.Contains(t, r.stderr, "writefence: stale epoch")
	}

	// A higher epoch from stdin lands, and -json reports it.
	stdin = strings.NewReader("from stdin")
	t.Cleanup(func() { stdin = os.Stdin })
	r = wf(t, "push", "-store", addr, "-json", "-writer", "node-b", "-epoch", "8", "wal", "shard-0")
	require.Equal(t, exitOK, r.code, "%s", r)
	m = jsonOf(t, r)
	assert.Equal(t, "ok", m["outcome"])
	assert.EqualValues(t, 8, m["epoch"])
	assert.EqualValues(t, 10, m["size"])

	// -out writes the payload; "-" puts it alone on stdout.
	out := filepath.Join(t.TempDir(), "out")
	require.Equal(t, exitOK, wf(t, "latest", "-store", addr, "-out", out, "wal", "shard-0").code)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "from stdin", string(got))
	r = wf(t, "latest", "-store", addr, "-out", "-", "wal", "shard-0")
	require.Equal(t, exitOK, r.code)
	assert.Equal(t, "from stdin", r.stdout)
	assert.Contains(t, r.stderr, "writer    node-b")
}

// TestWireIdentity: a record of another identity is refused by push and
// shown by latest, under the identity it carries, with the wire status.
func TestWireIdentity(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "rows")
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-identity", "other/v2", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)

	r := wf(t, "push", "-store", addr, "-writer", "b", "-epoch", "2", "-file", p, "wal", "s")
	assert.Equal(t, exitWire, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: wire: expected writefence/v1 found other/v2")

	r = wf(t, "latest", "-store", addr, "-json", "wal", "s")
	assert.Equal(t, exitWire, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "wire", m["outcome"])
	assert.Equal(t, "other/v2", m["identity"])
	assert.EqualValues(t, 1, m["epoch"])
	assert.Equal(t, "a", m["writer"])

	r = wf(t, "latest", "-store", addr, "-identity", "other/v2", "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "identity  other/v2\n")
}

// TestPushBrand: -brand verify refuses an unbranded store before writing;
// -brand claim brands it and then verify passes.
func TestPushBrand(t *testing.T) {
	addr, p := fileStore(t), writeFile(t, "x")
	// Each push in turn, and latest's status after it: a refused push
	// wrote nothing.
	for _, c := range []struct {
		brand, epoch string
		code, latest int
	}{
		{"verify", "1", exitWire, exitNotFound},
		{"claim", "1", exitOK, exitOK},
		{"verify", "2", exitOK, exitOK},
		{"maybe", "3", exitUsage, exitOK},
	} {
		r := wf(t, "push", "-store", addr, "-brand", c.brand, "-writer", "a", "-epoch", c.epoch, "-file", p, "wal", "s")
		assert.Equal(t, c.code, r.code, "-brand %s -epoch %s: %s", c.brand, c.epoch, r)
		assert.Equal(t, c.latest, wf(t, "latest", "-store", addr, "wal", "s").code, "after -brand %s -epoch %s", c.brand, c.epoch)
	}
}

func TestPushUsage(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	for _, args := range [][]string{
		{"-file", p, "-epoch", "1"},                  // no writer
		{"-file", p, "-writer", "a"},                 // no epoch
		{"-file", p, "-writer", "a", "-epoch", "0"},  // epoch 0
		{"-file", p, "-writer", "a", "-epoch", "-1"}, // not a uint
		{"-file", p, "-writer", "a", "-epoch", "1", "-json", "-unknown"},
	} {
		r := wf(t, append(append([]string{"push", "-store", addr}, args...), "wal", "s")...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
	}
	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "")
	assert.Equal(t, exitUsage, r.code, "an empty shard name is an invalid argument: %s", r)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", filepath.Join(t.TempDir(), "missing"), "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")
}

// pushAndSettle runs push and settle of wal/s on addr, by writer a at
// epoch with the payload file p, and returns each command's result.
func pushAndSettle(t *testing.T, addr, p, epoch string) map[string]result {
	t.Helper()
	args := []string{"-store", addr, "-writer", "a", "-epoch", epoch, "-file", p}
	return map[string]result{
		"push":   wf(t, append(append([]string{"push"}, args...), "wal", "s")...),
		"settle": wf(t, append(append([]string{"settle", "-confirm-version", "v"}, args...), "wal", "s")...),
	}
}

// TestEpochPlainDecimal: -epoch takes plain decimal digits only; "010" is
// not 8, "0x10" not 16. Each is a usage error and writes nothing.
func TestEpochPlainDecimal(t *testing.T) {
	addr := emptyStore(t)
	p := writeFile(t, "x")
	for _, epoch := range []string{"010", "0x10", "0X10", "0b1", "0o7", "1_0", "+1", "-1", " 1", "1 ", "１", "1e3", "", "18446744073709551616"} {
		for c, r := range pushAndSettle(t, addr, p, epoch) {
			assert.Equal(t, exitUsage, r.code, "%s -epoch %q: %s", c, epoch, r)
			assert.Contains(t, r.stderr, "plain decimal", "%s -epoch %q", c, epoch)
		}
	}
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")
	for _, c := range []string{"push", "settle"} {
		r := wf(t, "help", c)
		assert.Contains(t, r.stdout, "plain decimal digits", "help %s says how an epoch is written", c)
	}
}

// TestEpochLimit: push and settle refuse an -epoch above 2^63-1 as a usage
// error, before any I/O, saying why and naming the flag that allows it:
// once recorded, no command lowers an epoch, so a mistyped one would fence
// out every later writer for good. With the flag it lands.
func TestEpochLimit(t *testing.T) {
	addr := emptyStore(t)
	p := writeFile(t, "x")
	for _, epoch := range []string{"9223372036854775808", "18446744073709551615"} {
		for c, r := range pushAndSettle(t, addr, p, epoch) {
			assert.Equal(t, exitUsage, r.code, "%s -epoch %s: %s", c, epoch, r)
			assert.Contains(t, r.stderr, "above 2^63-1", "%s -epoch %s", c, epoch)
			assert.Contains(t, r.stderr, "no command lowers it", "%s -epoch %s: why", c, epoch)
			assert.Contains(t, r.stderr, "-allow-huge-epoch", "%s -epoch %s: the way out", c, epoch)
		}
	}
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")

	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "9223372036854775807", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "2^63-1 itself needs no flag: %s", r)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "18446744073709551615", "-allow-huge-epoch", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "epoch 18446744073709551615 ")
	for _, c := range []string{"push", "settle"} {
		r := wf(t, "help", c)
		assert.Contains(t, r.stdout, "-allow-huge-epoch", "help %s", c)
		assert.Contains(t, r.stdout, "2^63-1", "help %s", c)
	}
}

// TestEmptyPayload: an empty payload, from stdin (a cron job, </dev/null)
// or from -file, is refused by push and settle as a usage error unless
// -empty says it is meant, and nothing is written.
func TestEmptyPayload(t *testing.T) {
	addr := emptyStore(t)
	empty := writeFile(t, "")
	devNull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	t.Cleanup(func() { devNull.Close(); stdin = os.Stdin })
	stdin = devNull
	for _, file := range []string{"-", empty} {
		r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", file, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "-file %s: %s", file, r)
		assert.Contains(t, r.stderr, "is empty", "-file %s", file)
		assert.Contains(t, r.stderr, "-empty", "-file %s: the way out", file)
	}
	assert.Contains(t, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "wal", "s").stderr, "stdin is empty")
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")

	r := wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-empty", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 0, jsonOf(t, r)["size"])

	corrupt, version := corruptRecord(t)
	settle := []string{"settle", "-store", corrupt, "-confirm-version", version, "-writer", "op", "-epoch", "10", "-file", empty}
	r = wf(t, append(settle, "wal", "s")...)
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "-empty")
	assert.Equal(t, exitCorrupt, wf(t, "latest", "-store", corrupt, "wal", "s").code, "nothing was written")
	r = wf(t, append(settle, "-empty", "wal", "s")...)
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wf(t, "latest", "-json", "-store", corrupt, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 0, jsonOf(t, r)["size"])

	for _, c := range []string{"push", "settle"} {
		assert.Contains(t, wf(t, "help", c).stdout, "-empty", "help %s", c)
	}
	assert.Contains(t, wf(t, "help", "push").stdout, "at most 64 MiB", "help push names the payload limit")
}

// TestLs lists shards with hostile names, across plugins, one plugin, and
// as JSON lines; a corrupt record is listed, not skipped, and sets the
// exit status.
func TestLs(t *testing.T) {
	addr := fileStore(t)
	push := func(plugin, shard, writer, epoch string) {
		r := wf(t, "push", "-store", addr, "-writer", writer, "-epoch", epoch, "-file", writeFile(t, "x"), "--", plugin, shard)
		require.Equal(t, exitOK, r.code, "%s", r)
	}
	push("wal", "shard-0", "node-a", "7")
	push("wal", "a/b\tc", "node-b", "8")
	push("snap", "%41", "node-c", "9")
	push("wal/x", "s", "node-d", "1")
	require.Equal(t, exitOK, wf(t, "brand", "install", "-store", addr).code)

	r := wf(t, "ls", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, strings.Join([]string{ // in key order: "wal/x" is "wal%2Fx" in its key
		lsHeader,
		"snap\t%41\t9\tnode-c\tok\t0\t0\t0",
		"wal/x\ts\t1\tnode-d\tok\t0\t0\t0",
		"wal\ta/b\\tc\t8\tnode-b\tok\t0\t0\t0",
		"wal\tshard-0\t7\tnode-a\tok\t0\t0\t0",
	}, "\n")+"\n", r.stdout)

	r = wf(t, "ls", "-store", addr, "wal")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, 3, strings.Count(r.stdout, "\n"), "the header and two shards: %s", r.stdout)

	r = wf(t, "ls", "-json", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &e))
	assert.Equal(t, "a/b\tc", e["shard"])
	assert.EqualValues(t, 8, e["epoch"])

	// Damage the record of wal/shard-0 on disk: listed as corrupt.
	ds, err := writefence.NewDirConditionalStore(strings.TrimPrefix(addr, "file://"), nil)
	require.NoError(t, err)
	key, err := keys.Shard("", "wal", "shard-0")
	require.NoError(t, err)
	data, v, err := ds.Get(t.Context(), key)
	require.NoError(t, err)
	_, err = ds.PutIfVersion(t.Context(), key, data[:len(data)-1], v)
	require.NoError(t, err)
	r = wf(t, "ls", "-store", addr)
	assert.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Contains(t, r.stdout, "wal\tshard-0\t7\tnode-a\tcorrupt\t-\t-\t-\n", "the header's epoch and writer; no blobs nor floor")
	assert.Equal(t, 5, strings.Count(r.stdout, "\n"), "the header and every shard: %s", r.stdout)

	assert.Equal(t, exitUsage, wf(t, "ls", "-store", addr, "a", "b").code)
	r = wf(t, "ls", "-store", "ignoring://")
	assert.Equal(t, exitError, r.code, "a store that cannot list: %s", r)
}

// TestParseShardKey: parseShardKey inverts ShardKey, and refuses keys
// ShardKey never makes.
func TestParseShardKey(t *testing.T) {
	for _, c := range [][2]string{{"wal", "s"}, {"a/b", "c"}, {"a", "b/c"}, {".x", "y."}, {"%41", "\x00\xff"}, {"tab\t", "é"}} {
		for _, prefix := range []string{keys.DefaultPrefix, "p/", ""} {
			k, err := keys.Shard(prefix, c[0], c[1])
			require.NoError(t, err)
			if prefix == "" {
				prefix = keys.DefaultPrefix
			}
			plugin, shard, ok := keys.ParseShard(prefix, k)
			require.True(t, ok, "%q", k)
			assert.Equal(t, c[0], plugin)
			assert.Equal(t, c[1], shard)
		}
	}
	for _, k := range []string{"writefence/s/a", "writefence/s/a/b/c", "writefence/s/%41/b", "writefence/s/a/%4", "writefence/s//b", "writefence/_brand", "other/s/a/b"} {
		_, _, ok := keys.ParseShard(keys.DefaultPrefix, k)
		assert.False(t, ok, "%q", k)
	}
}

// FuzzParseRef: parseRef never panics; a reference it accepts is exactly
// the one blob put prints for what it returned (the CRC's hexadecimal in
// either case), and parses back to it; one it refuses is a usage error.
func FuzzParseRef(f *testing.F) {
	name := keys.BlobName(5, "node-4", "0123456789abcdef0123456789abcdef")
	f.Add(name + ":10:0000beef")
	f.Add(name + ":0:DEADBEEF")
	f.Add(name + ":010:0000beef")
	f.Add(name + ":9223372036854775808:0000beef")
	f.Add(name + ":-1:0000beef")
	f.Add(name + ":1:+0000bee")
	f.Add(name + ":1:0000beef:x")
	f.Add("not a blob:1:0000beef")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRef(s)
		if err != nil {
			if !isUsage(err) {
				t.Fatalf("parseRef(%q): %v, not a usage error", s, err)
			}
			return
		}
		printed := newBlobRef(r).Ref
		if !strings.EqualFold(printed, s) || printed[:len(printed)-8] != s[:len(s)-8] {
			t.Fatalf("parseRef(%q) = %+v, which blob put prints %q", s, r, printed)
		}
		if back, err := parseRef(printed); err != nil || back != r {
			t.Fatalf("parseRef(%q) = %+v, %v; want %+v", printed, back, err, r)
		}
	})
}
