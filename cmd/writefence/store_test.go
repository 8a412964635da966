package main

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestStoreAddressRefused: malformed addresses are usage errors, found
// before any I/O, and a secret typed into an address is never echoed.
func TestStoreAddressRefused(t *testing.T) {
	for _, addr := range []string{
		"ftp://x",
		"mem://host",
		"file://relative/path",
		"file:///tmp/x?sync=1",
		"s3://",
		"s3://bucket/path",
		"s3://bucket?endpoint=http://127.0.0.1:9000",
		"s3://bucket?secure=maybe",
		"s3://bucket?endpiont=127.0.0.1:9000",
		"s3://AKIAEXAMPLE:hunter2secret@bucket",
		"gs://",
		"gs://bucket?endpoint=127.0.0.1:4443",
		"valkey://127.0.0.1",
		"valkey://127.0.0.1:6379/zero",
		"valkey://127.0.0.1:6379/0?script=perhaps",
		"valkey://default:hunter2secret@127.0.0.1:6379/0",
		"::not a url",
	} {
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.NotContains(t, r.stderr+r.stdout, "hunter2secret", addr)
	}
}

func TestStoreAddressOpens(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "d")
	for addr, want := range map[string]any{
		"mem://":                         &writefence.MemStore{},
		"file://" + dir:                  &writefence.DirConditionalStore{},
		"file://localhost" + dir:         &writefence.DirConditionalStore{},
		"s3://bkt?endpoint=h:1&secure=0": &writefence.MinioConditionalStore{},
		"gs://bkt?endpoint=http://h:1":   &writefence.GCSConditionalStore{},
		"valkey://h:1/3?script=1":        &writefence.ValkeyConditionalStore{},
		"redis://h:1":                    &writefence.ValkeyConditionalStore{},
	} {
		s, err := openStore(ctx, addr)
		require.NoError(t, err, addr)
		assert.IsType(t, want, s.store, addr)
		assert.Equal(t, addr, s.addr)
		require.NoError(t, s.close(), addr)
	}
	s, err := openStore(ctx, "valkey://h:1/3?script=1")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.close()) }()
	assert.True(t, s.store.(*writefence.ValkeyConditionalStore).Script)
}

// TestDefaultStore: without -store the command uses $WRITEFENCE_STORE,
// then the XDG state directory, then ~/.local/state/writefence, and the
// record persists there between runs.
func TestDefaultStore(t *testing.T) {
	t.Setenv("WRITEFENCE_STORE", "")
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	p := writeFile(t, "persisted")
	require.Equal(t, exitOK, wf(t, "push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s").code)
	r := wf(t, "latest", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 9, jsonOf(t, r)["size"])
	assert.DirExists(t, filepath.Join(state, "writefence", "objects"))

	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", home)
	addr, err := storeAddress("")
	require.NoError(t, err)
	assert.Equal(t, (&url.URL{Scheme: "file", Path: filepath.Join(home, ".local", "state", "writefence")}).String(), addr)

	t.Setenv("WRITEFENCE_STORE", "mem://")
	addr, err = storeAddress("")
	require.NoError(t, err)
	assert.Equal(t, "mem://", addr)
	addr, err = storeAddress("file:///x")
	require.NoError(t, err)
	assert.Equal(t, "file:///x", addr, "-store wins over the environment")
}

// TestGlobalStoreFlag: -store before the command is the default of the
// command's own -store, which overrides it.
func TestGlobalStoreFlag(t *testing.T) {
	a, b := fileStore(t), fileStore(t)
	p := writeFile(t, "x")
	require.Equal(t, exitOK, wf(t, "-store", a, "push", "-writer", "w", "-epoch", "1", "-file", p, "wal", "s").code)
	require.Equal(t, exitOK, wf(t, "-store", b, "push", "-writer", "w", "-epoch", "1", "-file", p, "wal", "other").code)
	assert.Equal(t, exitOK, wf(t, "-store", a, "latest", "wal", "s").code)
	assert.Equal(t, exitNotFound, wf(t, "-store", a, "latest", "-store", b, "wal", "s").code)
}
