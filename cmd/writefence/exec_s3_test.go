//go:build linux && !writefence_nominio && !writefence_nosdk

package main

import (
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

func init() { execStores["s3"] = execS3 }

// execS3 runs the takeover scenario on MinIO, in a bucket that keeps every
// version of every object, and checks the record's history as the store
// kept it: epochs strictly rising, so no write of a term after the seal of
// the next; each term beginning with its holder's seal; every push that
// reported landing there, by its program's holder.
func execS3(t *testing.T) (string, []string, func(*testing.T, map[string][]uint64)) {
	s3 := testserver.S3Server(t)
	c := s3.Client(t, testserver.HTTPTransport(t))
	bucket := s3Bucket(t, c)
	require.NoError(t, c.SetBucketVersioning(t.Context(), bucket, minio.BucketVersioningConfiguration{Status: "Enabled"}))
	addr := "s3://" + bucket + "?endpoint=" + s3.Endpoint + "&secure=false"
	env := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}
	return addr, env, func(t *testing.T, landed map[string][]uint64) { checkS3History(t, c, bucket, landed) }
}

// checkS3History checks the versions of wal/0's record in bucket.
func checkS3History(t *testing.T, c *minio.Client, bucket string, landed map[string][]uint64) {
	ctx := t.Context()
	const key = "writefence/s/wal/0"
	type version struct {
		epoch  uint64
		writer string
	}
	var history []version
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true, ReverseVersions: true}) {
		require.NoError(t, o.Err)
		if o.Key != key {
			continue
		}
		require.False(t, o.IsDeleteMarker)
		obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{VersionID: o.VersionID})
		require.NoError(t, err)
		data, err := io.ReadAll(obj)
		obj.Close()
		require.NoError(t, err)
		h, check := record.DecodeHeader(data)
		require.Empty(t, check, "version %s", o.VersionID)
		history = append(history, version{h.Epoch, h.Writer})
	}
	require.NotEmpty(t, history)
	writers := map[uint64]string{} // term -> its writer
	for i, v := range history {
		term := v.epoch >> 32
		if i > 0 {
			require.Greater(t, v.epoch, history[i-1].epoch, "version %d of %v: epochs strictly rise", i, history)
		}
		if i == 0 || history[i-1].epoch>>32 != term {
			assert.Equal(t, uint64(1), v.epoch&maxTerm, "term %d begins with its seal: %v", term, history)
		}
		if w, ok := writers[term]; ok {
			assert.Equal(t, w, v.writer, "one writer per term: %v", history)
		}
		writers[term] = v.writer
	}
	assert.Equal(t, map[uint64]string{1: "a", 2: "b", 3: "c"}, writers)
	in := map[version]bool{}
	for _, v := range history {
		in[v] = true
	}
	for holder, epochs := range landed {
		for _, e := range epochs {
			assert.True(t, in[version{e, holder}], "%s's push at epoch %d landed but is not in the history %v", holder, e, history)
		}
	}
}
