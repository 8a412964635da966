//go:build !writefence_nominio && !writefence_nosdk

package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// TestS3Address: the forms of an S3 address, and the malformed ones,
// refused as usage errors before any I/O, echoing no secret; a bucket name
// the service would refuse is one too.
func TestS3Address(t *testing.T) {
	assertOpens(t, "*writefence.minioStore", "s3://bkt?endpoint=h:1&secure=0")
	assertRefused(t,
		"s3://",
		"s3://bucket/path",
		"s3://bucket?endpoint=http://127.0.0.1:9000",
		"s3://bucket?secure=maybe",
		"s3://bucket?endpiont=127.0.0.1:9000",
		"s3://AKIAEXAMPLE:hunter2secret@bucket",
	)
	assertRefusedSaying(t, map[string]string{
		"s3://ab?endpoint=127.0.0.1:1":         "bucket",
		"s3://Bad_Bucket?endpoint=127.0.0.1:1": "bucket",
		"s3://a..b?endpoint=127.0.0.1:1":       "bucket",
	})
}

// TestS3PlainHTTPAdvice: https to a plain HTTP endpoint suggests
// secure=false.
func TestS3PlainHTTPAdvice(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	r := wf(t, "latest", "-timeout", "30s", "-store", "s3://mirrors?endpoint="+u.Host, "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "secure=false")
}

// TestInterrupted: SIGINT and SIGTERM end the command with their own
// status, not the network error's. The signal is sent once the command is
// connected to a server that never answers, so it is the only way out.
func TestInterrupted(t *testing.T) {
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			addr, accepted := silentServer(t)
			c := wfCommand(t, "", "latest", "-timeout", "0", "-store", "s3://mirrors?secure=false&endpoint="+addr, "wal", "s")
			var stderr strings.Builder
			c.Stderr = &stderr
			require.NoError(t, c.Start())
			select {
			case <-accepted:
			case <-time.After(time.Minute):
				c.Process.Kill()
				t.Fatal("the command never connected")
			}
			require.NoError(t, c.Process.Signal(sig))
			err := c.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			assert.Equal(t, exitInterrupted, exit.ExitCode(), "%s", stderr.String())
		})
	}
	assert.Contains(t, exitHelp(), "130 interrupted")
}

// s3Bucket creates a bucket of the test's own through c, and removes it
// when the test ends with its objects, every version of them: a test may
// turn versioning on.
func s3Bucket(t *testing.T, c *minio.Client) string {
	t.Helper()
	bucket := testserver.MinioBucket(t, c)
	t.Cleanup(func() { // runs before MinioBucket's, which removes the bucket
		ctx, cancel := testserver.CleanupContext(t)
		defer cancel()
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
			err := o.Err
			if err == nil {
				err = c.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{VersionID: o.VersionID})
			}
			if err != nil {
				t.Errorf("cleanup: %s: %v", bucket, err)
			}
		}
	})
	return bucket
}

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

func TestServerS3(t *testing.T) {
	serverScenario(t, s3Address(t), "")
}

// TestServerS3CredentialsNeverPrinted: wrong credentials from the
// environment fail with the plain error status, and the secret appears in
// no output; missing ones are named.
func TestServerS3CredentialsNeverPrinted(t *testing.T) {
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
}
