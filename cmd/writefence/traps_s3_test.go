//go:build !writefence_nominio && !writefence_nosdk

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// missingS3Bucket returns the name of a bucket that does not exist on the
// S3 server and a client of it; the bucket, once a test created it, is
// removed with its objects when the test ends.
func missingS3Bucket(t *testing.T) (string, testserver.S3, *minio.Client) {
	s3 := testserver.S3Server(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	c := s3.Client(t, nil)
	bucket := testserver.MinioBucket(t, c)
	require.NoError(t, c.RemoveBucket(context.Background(), bucket))
	return bucket, s3, c
}

// TestS3MissingBucket: a bucket that does not exist is named, with the
// init command that creates it, after one request and no retry, on reads
// and writes alike; init creates it, and then a push lands.
func TestS3MissingBucket(t *testing.T) {
	bucket, s3, c := missingS3Bucket(t)
	proxy, requests := countingProxy(t, "http://"+s3.Endpoint)
	addr := "s3://" + bucket + "?endpoint=" + proxy + "&secure=false"
	p := writeFile(t, "segment")
	assertMissing(t, addr, "bucket "+bucket, requests,
		[]string{"latest", "wal", "s"},
		[]string{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
		[]string{"blob", "put", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
	)
	exists, err := c.BucketExists(t.Context(), bucket)
	require.NoError(t, err)
	require.False(t, exists, "nothing created the bucket")

	assertInitCreates(t, addr, "bucket "+bucket, p)
	r := wf(t, "init", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.True(t, strings.HasPrefix(r.stdout, "exists: "), "%s", r)
}

// TestS3CreateOnWrite: -create on a command that writes creates a missing
// bucket, as init does; on a read it is no flag at all.
func TestS3CreateOnWrite(t *testing.T) {
	bucket, s3, _ := missingS3Bucket(t)
	addr := "s3://" + bucket + "?endpoint=" + s3.Endpoint + "&secure=false"
	r := wf(t, "push", "-create", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, exitUsage, wf(t, "latest", "-create", "-store", addr, "wal", "s").code)
}
