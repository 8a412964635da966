package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
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
	ds, err := writefence.NewDirConditionalStore(strings.TrimPrefix(addr, "file://"))
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
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	m := jsonOf(t, r)
	assert.EqualValues(t, 5, m["epoch"])
	assert.Equal(t, "a", m["writer"])
	assert.Equal(t, "truncated payload", m["check"])
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

	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitCorrupt, r.code)
	j := jsonOf(t, r)
	version := j["version"].(string)
	assert.True(t, strings.HasPrefix(version, "damaged-"), version)
	assert.Contains(t, m[1], "-confirm-version "+version+" ")

	r = wf(t, "push", "-store", addr, "-writer", "b", "-epoch", "9", "-file", writeFile(t, "x"), "wal", "s")
	assert.Equal(t, exitCorrupt, r.code, "a push never overwrites it: %s", r)

	// Run the suggested line, with the placeholders filled in.
	line := strings.NewReplacer("-writer W", "-writer operator", "-epoch E", "-epoch 10", "-file F", "-file "+writeFile(t, "rebuilt")).Replace(m[1])
	r = wf(t, strings.Fields(line)...)
	require.Equal(t, exitOK, r.code, "%s: %s", line, r)
	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 10, jsonOf(t, r)["epoch"])
}

func TestSettle(t *testing.T) {
	addr, version := corruptRecord(t)
	fresh := writeFile(t, "rebuilt")
	settle := func(extra ...string) result {
		return wf(t, append([]string{"settle", "-store", addr, "-writer", "operator", "-epoch", "100", "-file", fresh}, append(extra, "wal", "s")...)...)
	}

	r := settle()
	assert.Equal(t, exitUsage, r.code, "no confirmation: %s", r)
	r = settle("-confirm-version", "not-"+version)
	assert.Equal(t, exitConflict, r.code, "another version: %s", r)
	assert.Contains(t, r.stderr, "not the confirmed")
	assert.Equal(t, exitCorrupt, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing was written")

	r = settle("-json", "-confirm-version", version)
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "ok", m["outcome"])
	assert.Equal(t, version, m["replaced"])
	assert.Equal(t, "truncated payload", m["check"])
	assert.NotEmpty(t, m["version"])

	r = wf(t, "latest", "-json", "-store", addr, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	m = jsonOf(t, r)
	assert.EqualValues(t, 100, m["epoch"])
	assert.Equal(t, "operator", m["writer"])
	assert.EqualValues(t, len("rebuilt"), m["size"])

	// Settled: the record is sound, so a second settle is refused, and the
	// fence admits pushes above the operator's epoch again.
	r = settle("-confirm-version", version)
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "not corrupt")
	assert.Equal(t, exitStale, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "99", "-file", fresh, "wal", "s").code)
	assert.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "101", "-file", fresh, "wal", "s").code)
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
