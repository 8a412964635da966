package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// serverEnv returns the environment variable naming a real server. When it
// is unset the test is skipped, unless WRITEFENCE_REQUIRE_SERVERS is set
// (as .ci/run does), in which case the test fails.
func serverEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("WRITEFENCE_REQUIRE_SERVERS") != "" {
			t.Fatalf("%s is not set but WRITEFENCE_REQUIRE_SERVERS is: the server this test needs was not started", name)
		}
		t.Skipf("%s not set: start the servers with .ci/run (or export it) to run this test", name)
	}
	return v
}

// uniqueName returns a fresh name for a test's bucket or key prefix.
func uniqueName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return "wf-" + hex.EncodeToString(b)
}

func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// s3Address creates a bucket of the test's own on the S3 server, removed
// with its objects afterwards, and returns its address. The command finds
// the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
func s3Address(t *testing.T) string {
	endpoint := serverEnv(t, "WRITEFENCE_S3_ENDPOINT")
	access, secret := serverEnv(t, "WRITEFENCE_S3_ACCESS_KEY"), serverEnv(t, "WRITEFENCE_S3_SECRET_KEY")
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	c, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, "")})
	require.NoError(t, err)
	bucket := uniqueName(t)
	require.NoError(t, c.MakeBucket(t.Context(), bucket, minio.MakeBucketOptions{}))
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				t.Errorf("cleanup: list %s: %v", bucket, o.Err)
				break
			}
			if err := c.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
				t.Errorf("cleanup: remove %s: %v", o.Key, err)
			}
		}
		if err := c.RemoveBucket(ctx, bucket); err != nil {
			t.Errorf("cleanup: remove bucket %s: %v", bucket, err)
		}
	})
	return "s3://" + bucket + "?endpoint=" + endpoint + "&secure=false"
}

// gcsBucket creates a bucket of the test's own on the emulator, removed
// with its objects afterwards, and returns its name and the endpoint.
func gcsBucket(t *testing.T) (bucket, endpoint string) {
	endpoint = serverEnv(t, "WRITEFENCE_GCS_ENDPOINT")
	client, err := storage.NewClient(t.Context(), option.WithEndpoint(endpoint+"/storage/v1/"), option.WithoutAuthentication())
	require.NoError(t, err)
	bucket = uniqueName(t)
	b := client.Bucket(bucket)
	require.NoError(t, b.Create(t.Context(), "writefence-test", nil))
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := cleanupCtx()
		defer cancel()
		for it := b.Objects(ctx, nil); ; {
			attrs, err := it.Next()
			if errors.Is(err, iterator.Done) {
				break
			}
			if err != nil {
				t.Errorf("cleanup: list %s: %v", bucket, err)
				return
			}
			if err := b.Object(attrs.Name).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
				t.Errorf("cleanup: delete %s: %v", attrs.Name, err)
			}
		}
		if err := b.Delete(ctx); err != nil {
			t.Errorf("cleanup: delete bucket %s: %v", bucket, err)
		}
	})
	return bucket, endpoint
}

// valkeyPrefix returns a key prefix of the test's own on the Valkey
// server; its keys are deleted afterwards.
func valkeyPrefix(t *testing.T, addr string) string {
	prefix := uniqueName(t) + "/"
	t.Cleanup(func() {
		client := redis.NewClient(&redis.Options{Addr: addr})
		defer client.Close()
		ctx, cancel := cleanupCtx()
		defer cancel()
		keys, err := client.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Errorf("cleanup: keys %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup: del: %v", err)
			}
		}
	})
	return prefix
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
	addr := serverEnv(t, "WRITEFENCE_VALKEY_ADDR")
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
	for _, store := range []string{"valkey://" + addr + "/0", "valkey://" + addr + "/0?script=1"} {
		t.Run(store, func(t *testing.T) { serverScenario(t, store, valkeyPrefix(t, addr)) })
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
		addr := serverEnv(t, "WRITEFENCE_VALKEY_ADDR")
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
