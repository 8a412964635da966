package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
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
