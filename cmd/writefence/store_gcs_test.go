//go:build !writefence_nogcs && !writefence_nosdk

package main

import (
	"context"
	"net/url"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// TestGCSAddress: the forms of a Cloud Storage address, and the malformed
// ones, refused as usage errors before any I/O; a bucket name the service
// would refuse is one too.
func TestGCSAddress(t *testing.T) {
	assertOpens(t, "*writefence.gcsStore", "gs://bkt?endpoint=http://h:1")
	assertRefused(t, "gs://", "gs://bucket?endpoint=127.0.0.1:4443")
	assertRefusedSaying(t, map[string]string{
		"gs://ab?endpoint=http://127.0.0.1:1":    "bucket",
		"gs://Upper?endpoint=http://127.0.0.1:1": "bucket",
		"gs://-x-?endpoint=http://127.0.0.1:1":   "bucket",
	})
}

// TestGCSConnectionRefused: a gs:// endpoint that refuses the connection
// fails with the refusal, as S3 and Valkey do, rather than retrying until
// -timeout ends it with a deadline.
func TestGCSConnectionRefused(t *testing.T) {
	addr := "gs://mirrors?endpoint=http://" + refusingPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := openStore(ctx, addr)
	require.NoError(t, err)
	defer s.close()
	_, _, err = s.store.Get(ctx, "writefence/s/wal/s")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)

	r := wf(t, "latest", "-timeout", "20s", "-store", addr, "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "connection refused")
	assert.NotContains(t, r.stderr, "deadline")
	assert.NotContains(t, r.stderr, "no answer from")
}

// gcsBucket creates a bucket of the test's own on the emulator, removed
// with its objects afterwards, and returns its name, the endpoint and a
// client of the emulator.
func gcsBucket(t *testing.T) (bucket, endpoint string, c *storage.Client) {
	endpoint = testserver.GCSEndpoint(t)
	c = testserver.GCSClient(t, endpoint, nil)
	return testserver.GCSBucket(t, c), endpoint, c
}

func TestServerGCS(t *testing.T) {
	bucket, endpoint, _ := gcsBucket(t)
	serverScenario(t, "gs://"+bucket+"?endpoint="+endpoint, "")
}

// TestServerGCSEmulatorHost: with STORAGE_EMULATOR_HOST set, gs://bucket
// reaches the emulator without an endpoint in the address.
func TestServerGCSEmulatorHost(t *testing.T) {
	bucket, endpoint, _ := gcsBucket(t)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	t.Setenv("STORAGE_EMULATOR_HOST", u.Host)
	addr := "gs://" + bucket
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s").code)
	r := wf(t, "latest", "-store", addr, "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
}
