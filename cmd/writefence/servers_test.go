package main

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// s3Address creates a bucket of the test's own on the S3 server, removed
// with its objects afterwards, and returns its address. The command finds
// the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
func s3Address(t *testing.T) string {
	s3 := testserver.S3Server(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	bucket := testserver.MinioBucket(t, s3.Client(t, nil))
	return "s3://" + bucket + "?endpoint=" + s3.Endpoint + "&secure=false"
}

// gcsBucket creates a bucket of the test's own on the emulator, removed
// with its objects afterwards, and returns its name and the endpoint.
func gcsBucket(t *testing.T) (bucket, endpoint string) {
	endpoint = testserver.GCSEndpoint(t)
	return testserver.GCSBucket(t, testserver.GCSClient(t, endpoint, nil)), endpoint
}

func TestServerS3(t *testing.T) {
	serverScenario(t, s3Address(t), "")
}

func TestServerGCS(t *testing.T) {
	bucket, endpoint := gcsBucket(t)
	serverScenario(t, "gs://"+bucket+"?endpoint="+endpoint, "")
}

// TestServerGCSEmulatorHost: with STORAGE_EMULATOR_HOST set, gs://bucket
// reaches the emulator without an endpoint in the address.
func TestServerGCSEmulatorHost(t *testing.T) {
	bucket, endpoint := gcsBucket(t)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	t.Setenv("STORAGE_EMULATOR_HOST", u.Host)
	addr := "gs://" + bucket
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s").code)
	r := wf(t, "latest", "-store", addr, "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
}

func TestServerValkey(t *testing.T) {
	addr := testserver.ValkeyAddr(t)
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
	for _, store := range []string{"valkey://" + addr + "/0", "valkey://" + addr + "/0?script=1"} {
		t.Run(store, func(t *testing.T) { serverScenario(t, store, testserver.ValkeyPrefix(t, addr)) })
	}
}

// TestServerCredentialsNeverPrinted: wrong credentials from the
// environment fail with the plain error status, and the secret appears in
// no output.
func TestServerCredentialsNeverPrinted(t *testing.T) {
	const secret = "wrong-secret-d41d8cd9"
	t.Run("s3", func(t *testing.T) {
		addr := s3Address(t)
		t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.NotContains(t, r.stdout+r.stderr, secret)
	})
	t.Run("s3 without credentials", func(t *testing.T) {
		addr := s3Address(t)
		for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
			t.Setenv(v, "")
		}
		t.Setenv("HOME", t.TempDir()) // no ~/.aws/credentials
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "")
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.Contains(t, r.stderr, "AWS_ACCESS_KEY_ID (unset)", "%s", r)
		assert.Contains(t, r.stderr, "MINIO_ROOT_USER (unset)")
	})
	t.Run("valkey", func(t *testing.T) {
		addr := testserver.ValkeyAddr(t)
		// An unknown ACL user: a server without a password ignores a
		// password alone.
		t.Setenv("VALKEY_USERNAME", "writefence-nobody")
		t.Setenv("VALKEY_PASSWORD", secret)
		r := wf(t, "latest", "-store", "valkey://"+addr+"/0", "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.NotContains(t, r.stdout+r.stderr, secret)
		assert.Contains(t, r.stderr, "VALKEY_PASSWORD (set)", "the variables read are named")
	})
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
	slices.Sort(lines) // Valkey's SCAN has no order
	assert.Equal(t, []string{"wal\ts\t2\tnode-a\tok", "wal/x\ta b\t4\tnode-c\tok"}, lines)
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
	assert.Equal(t, "wal\ts\t3\tnode-a\tcorrupt\n", r.stdout, "listed with its header's epoch, not skipped")
	assert.Equal(t, exitCorrupt, cmd("push", "-writer", "node-b", "-epoch", "9", "-file", p, "wal", "s").code)
	r = cmd("settle", "-confirm-version", corruptV, "-writer", "operator", "-epoch", "10", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("latest", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.True(t, strings.Contains(r.stdout, "epoch     10\n") && strings.Contains(r.stdout, "writer    operator\n"), "%s", r)
}
