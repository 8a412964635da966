package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeal: seal raises the recorded epoch and keeps the payload; a write
// at or below it is refused; sealing again is a success, lower a stale
// epoch; a shard never written is sealed empty.
func TestSeal(t *testing.T) {
	addr := fileStore(t)
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "node-a", "-epoch", "3", "-file", writeFile(t, "state"), "wal", "s").code)
	r := wf(t, "seal", "-store", addr, "-writer", "node-b", "-epoch", "5", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "sealed: writefence/s/wal/s at epoch 5 by node-b; every write at or below it is refused\n", r.stdout)
	r = wf(t, "latest", "-json", "-store", addr, "-out", filepath.Join(t.TempDir(), "payload"), "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.EqualValues(t, 5, m["epoch"])
	assert.Equal(t, "node-b", m["writer"])
	assert.EqualValues(t, 5, m["size"], "the payload is kept")

	r = wf(t, "push", "-store", addr, "-writer", "node-a", "-epoch", "4", "-file", writeFile(t, "late"), "wal", "s")
	assert.Equal(t, exitStale, r.code, "%s", r)
	assert.Equal(t, exitOK, wf(t, "seal", "-store", addr, "-writer", "node-b", "-epoch", "5", "wal", "s").code, "the same seal again")
	assert.Equal(t, exitStale, wf(t, "seal", "-store", addr, "-writer", "node-c", "-epoch", "5", "wal", "s").code)
	r = wf(t, "seal", "-json", "-store", addr, "-writer", "node-b", "-epoch", "7", "wal", "new")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, map[string]any{"outcome": "ok", "key": "writefence/s/wal/new", "plugin": "wal", "shard": "new", "epoch": 7.0, "writer": "node-b"}, jsonOf(t, r))
	r = wf(t, "latest", "-json", "-store", addr, "wal", "new")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 0, jsonOf(t, r)["size"])
	assert.Equal(t, exitUsage, wf(t, "seal", "-store", addr, "-writer", "node-b", "wal", "s").code, "-epoch is required")
}
