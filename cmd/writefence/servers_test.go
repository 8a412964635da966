//go:build (!writefence_nominio || !writefence_nogcs || !writefence_novalkey || !writefence_nodynamodb || !writefence_noetcd || !writefence_noazblob || !writefence_nopostgres) && !writefence_nosdk

package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// awsCredentials gives the command an AWS key pair in the environment, as
// the AWS SDK reads it, and keeps it from asking a cloud metadata service.
func awsCredentials(t *testing.T, id, secret string) {
	t.Setenv("AWS_ACCESS_KEY_ID", id)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// azureSharedKey gives the command an Azure storage account and its
// shared key in the environment, and no connection string.
func azureSharedKey(t *testing.T, account, key string) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", account)
	t.Setenv("AZURE_STORAGE_KEY", key)
}

// noValkeyPassword leaves the command no Valkey password in the
// environment.
func noValkeyPassword(t *testing.T) {
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
}

// startServer starts the server c, its output in log, and when the test
// ends signals it with stop and waits for it to exit; exited is closed
// once it has.
func startServer(t *testing.T, c *exec.Cmd, stop os.Signal) (log *strings.Builder, exited <-chan struct{}) {
	t.Helper()
	log = new(strings.Builder)
	c.Stdout, c.Stderr = log, log
	require.NoError(t, c.Start())
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = c.Process.Signal(stop)
		<-done
	})
	return log, done
}

// serverScenario runs every subcommand against the store at addr, under
// prefix (the default when empty), and asserts each exit status.
func serverScenario(t *testing.T, addr, prefix string) {
	store := []string{"-store", addr}
	if prefix != "" {
		store = append(store, "-prefix", prefix)
	}
	cmd := func(name string, args ...string) result {
		return wf(t, append(append([]string{name}, store...), args...)...)
	}
	p := writeFile(t, "segment 0001")

	// latest and push: not found, landed, stale, the version shown.
	assert.Equal(t, exitNotFound, cmd("latest", "wal", "s").code)
	r := cmd("push", "-writer", "node-a", "-epoch", "2", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("push", "-json", "-writer", "zombie", "-epoch", "2", "-file", p, "wal", "s")
	assert.Equal(t, exitStale, r.code, "%s", r)
	assert.EqualValues(t, 2, jsonOf(t, r)["recorded_epoch"])
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.EqualValues(t, 2, m["epoch"])
	assert.Equal(t, "node-a", m["writer"])
	assert.EqualValues(t, 12, m["size"])
	assert.NotEmpty(t, m["version"])
	key := m["key"].(string)

	// ls: the store's own listing, names that need escaping included.
	require.Equal(t, exitOK, cmd("push", "-writer", "node-c", "-epoch", "4", "-file", p, "--", "wal/x", "a b").code)
	r = cmd("ls")
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.NotEmpty(t, lines)
	assert.Equal(t, lsHeader, lines[0])
	lines = lines[1:]
	slices.Sort(lines) // Valkey's SCAN has no order
	assert.Equal(t, []string{"wal\ts\t2\tnode-a\tok\t0\t0\t0", "wal/x\ta b\t4\tnode-c\tok\t0\t0\t0"}, lines)
	r = cmd("ls", "-json", "wal/x")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "a b", jsonOf(t, r)["shard"])

	// brand: absent, installed, claimed, foreign.
	assert.Equal(t, exitWire, cmd("brand", "verify").code)
	r = cmd("brand", "install", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, true, jsonOf(t, r)["installed"])
	assert.Equal(t, exitOK, cmd("brand", "claim").code)
	assert.Equal(t, exitOK, cmd("brand", "verify").code)
	assert.Equal(t, exitWire, cmd("brand", "verify", "-identity", "other/v2").code)
	assert.Equal(t, exitOK, cmd("push", "-brand", "verify", "-writer", "node-a", "-epoch", "3", "-file", p, "wal", "s").code)
	// An installed brand refuses a writer of another format without being
	// asked to, and nothing is written.
	r = cmd("push", "-identity", "other/v2", "-writer", "node-x", "-epoch", "1", "-file", p, "wal", "fresh")
	assert.Equal(t, exitWire, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: wire: expected other/v2 found writefence/v1")
	assert.Equal(t, exitNotFound, cmd("latest", "wal", "fresh").code)

	// probe and race.
	r = cmd("probe", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, true, jsonOf(t, r)["trusted"])
	r = cmd("race", "-writers", "8", "-rounds", "5")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "exactly one winner each")

	// settle: corrupt the record through the store itself, then settle it.
	ctx := t.Context()
	s, err := openStore(ctx, addr)
	require.NoError(t, err)
	defer s.close()
	data, v, err := s.store.Get(ctx, key)
	require.NoError(t, err)
	corruptV, err := s.store.PutIfVersion(ctx, key, data[:len(data)-1], v)
	require.NoError(t, err)
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Equal(t, corruptV, jsonOf(t, r)["version"])
	r = cmd("ls", "wal")
	assert.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Equal(t, lsHeader+"\nwal\ts\t3\tnode-a\tcorrupt\t-\t-\t-\n", r.stdout, "listed with its header's epoch, not skipped")
	assert.Equal(t, exitCorrupt, cmd("push", "-writer", "node-b", "-epoch", "9", "-file", p, "wal", "s").code)
	r = cmd("settle", "-confirm-version", corruptV, "-writer", "operator", "-epoch", "10", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("latest", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.True(t, strings.Contains(r.stdout, "epoch     10\n") && strings.Contains(r.stdout, "writer    operator\n"), "%s", r)

	// seal: a new writer raises the epoch, the payload stays.
	r = cmd("seal", "-writer", "node-b", "-epoch", "11", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 11, jsonOf(t, r)["epoch"])
	assert.EqualValues(t, 12, jsonOf(t, r)["size"])
	assert.Equal(t, exitStale, cmd("push", "-writer", "node-a", "-epoch", "11", "-file", p, "wal", "s").code)

	// The blobs in a directory store beside the records (-blobs), whether
	// the store holds blobs itself or not.
	blobs := fileStore(t)
	r = cmd("blob put", "-blobs", blobs, "-writer", "node-a", "-epoch", "1", "-file", p, "stream", "b")
	require.Equal(t, exitOK, r.code, "%s", r)
	ref := strings.TrimSpace(r.stdout)
	r = cmd("commit", "-blobs", blobs, "-writer", "node-a", "-epoch", "2", "-add", ref, "-keep-payload", "stream", "b")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("blob get", "-blobs", blobs, "stream", "b", nameOf(ref))
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "segment 0001", r.stdout)
	r = cmd("gc", "-blobs", blobs, "stream", "b")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "kept\t"+nameOf(ref)+"\t12\treferenced\n", r.stdout)
	r = cmd("ls", "-blobs", blobs, "stream")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, lsHeader+"\nstream\tb\t2\tnode-a\tok\t1\t12\t0\n", r.stdout)
}
