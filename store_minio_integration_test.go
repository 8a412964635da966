package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// minioServer is the S3 server named by the environment.
type minioServer struct {
	endpoint, accessKey, secretKey string
}

func minioServerEnv(t *testing.T) minioServer {
	t.Helper()
	return minioServer{
		endpoint:  serverEnv(t, "WRITEFENCE_S3_ENDPOINT"),
		accessKey: serverEnv(t, "WRITEFENCE_S3_ACCESS_KEY"),
		secretKey: serverEnv(t, "WRITEFENCE_S3_SECRET_KEY"),
	}
}

func (m minioServer) client(t *testing.T, accessKey, secretKey string) *minio.Client {
	t.Helper()
	c, err := minio.New(m.endpoint, &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, "")})
	require.NoError(t, err)
	return c
}

// newMinioBucket creates a bucket of its own for the test on the real
// server and removes it, with everything in it, when the test ends.
func newMinioBucket(t *testing.T) (*minio.Client, string) {
	t.Helper()
	m := minioServerEnv(t)
	c := m.client(t, m.accessKey, m.secretKey)
	bucket := uniqueName(t)
	require.NoError(t, c.MakeBucket(t.Context(), bucket, minio.MakeBucketOptions{}))
	t.Cleanup(func() {
		// t.Context() is already done when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				t.Errorf("listing %s for cleanup: %v", bucket, o.Err)
				break
			}
			if err := c.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := c.RemoveBucket(ctx, bucket); err != nil {
			t.Errorf("cleanup: removing bucket %s: %v", bucket, err)
		}
	})
	return c, bucket
}

func TestMinioConformance(t *testing.T) {
	c, bucket := newMinioBucket(t)
	store := writefence.NewMinioConditionalStore(c, bucket)
	writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore { return store })
}

// TestMinioProtocol walks the S3 answers the adapter classifies, on the
// real server.
func TestMinioProtocol(t *testing.T) {
	c, bucket := newMinioBucket(t)
	s := writefence.NewMinioConditionalStore(c, bucket)
	ctx := t.Context()

	_, _, err := s.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	_, err = s.PutIfVersion(ctx, "k", []byte("one"), "d41d8cd98f00b204e9800998ecf8427e")
	require.ErrorIs(t, err, writefence.ErrConflict, "If-Match on a missing key")
	_, _, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "If-Match on a missing key must not create it")

	v1, err := s.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	assert.NotContains(t, v1, `"`)
	data, v, err := s.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "one", string(data))
	assert.Equal(t, v1, v)

	_, err = s.PutIfVersion(ctx, "k", []byte("other"), "")
	require.ErrorIs(t, err, writefence.ErrConflict, "create-only on an existing key")
	var resp minio.ErrorResponse
	require.ErrorAs(t, err, &resp)
	assert.Equal(t, 412, resp.StatusCode)

	v2, err := s.PutIfVersion(ctx, "k", []byte("two"), v1)
	require.NoError(t, err)
	_, err = s.PutIfVersion(ctx, "k", []byte("three"), v1)
	require.ErrorIs(t, err, writefence.ErrConflict, "stale update")
	data, v, err = s.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	assert.Equal(t, v2, v)

	require.NoError(t, s.Delete(ctx, "k"))
	require.NoError(t, s.Delete(ctx, "k"), "deleting a missing key is not an error")
	_, _, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)
}

// TestMinioLargeRecordIsSinglePart writes a 17 MiB record, above
// minio-go's multipart threshold: a multipart ETag ends in "-<parts>", a
// single PUT's is a plain MD5.
func TestMinioLargeRecordIsSinglePart(t *testing.T) {
	c, bucket := newMinioBucket(t)
	s := writefence.NewMinioConditionalStore(c, bucket)
	big := bytes.Repeat([]byte("0123456789abcdef"), 17<<20/16)

	v1, err := s.PutIfVersion(t.Context(), "big", big, "")
	require.NoError(t, err)
	assert.NotContains(t, v1, "-", "multipart ETag: the record was not written in one PUT")
	_, err = s.PutIfVersion(t.Context(), "big", big, "")
	require.ErrorIs(t, err, writefence.ErrConflict)

	big[0] = 'x'
	v2, err := s.PutIfVersion(t.Context(), "big", big, v1)
	require.NoError(t, err)
	data, v, err := s.Get(t.Context(), "big")
	require.NoError(t, err)
	assert.Equal(t, v2, v)
	assert.True(t, bytes.Equal(big, data))

	s.MaxObjectSize = 16 << 20
	_, _, err = s.Get(t.Context(), "big")
	var tl *writefence.StoreError
	require.ErrorAs(t, err, &tl)
	assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", 16<<20))
}

// TestMinioFenceRace: 16 writers push the same epoch each round; exactly
// one lands, every other is refused as stale.
func TestMinioFenceRace(t *testing.T) {
	const writers, rounds = 16, 50
	c, bucket := newMinioBucket(t)
	fence := &writefence.Fence{Store: writefence.NewMinioConditionalStore(c, bucket)}

	wins, stale := 0, 0
	for round := 1; round <= rounds; round++ {
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				errs[w] = fence.Push(t.Context(), "race", "shard", fmt.Sprintf("writer-%02d", w), uint64(round), fmt.Appendf(nil, "round %d by %d", round, w))
			})
		}
		wg.Wait()
		roundWins := 0
		for w, err := range errs {
			switch {
			case err == nil:
				roundWins++
			case errors.Is(err, writefence.ErrStaleEpoch):
				stale++
			default:
				t.Errorf("round %d writer %d: %v", round, w, err)
			}
		}
		wins += roundWins
		require.Equal(t, 1, roundWins, "round %d: winners", round)
		epoch, _, _, err := fence.Latest(t.Context(), "race", "shard")
		require.NoError(t, err)
		require.Equal(t, uint64(round), epoch)
	}
	t.Logf("minio: %d rounds of %d writers: %d pushes landed, %d refused as stale", rounds, writers, wins, stale)
	assert.Equal(t, rounds, wins)
	assert.Equal(t, rounds*(writers-1), stale)
}

// TestMinioFailuresAreNeitherSentinel: a missing bucket, bad credentials
// and a stopped server are failures, never "not found" or "conflict", and
// the secret appears in none of them.
func TestMinioFailuresAreNeitherSentinel(t *testing.T) {
	m := minioServerEnv(t)
	c, bucket := newMinioBucket(t)
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stoppedAddr := stopped.Addr().String()
	require.NoError(t, stopped.Close())
	stoppedClient, err := minio.New(stoppedAddr, &minio.Options{
		Creds:      credentials.NewStaticV4(m.accessKey, m.secretKey, ""),
		MaxRetries: 2,
	})
	require.NoError(t, err)

	const wrongSecret = "wrong-secret-must-not-leak"
	stores := map[string]*writefence.MinioConditionalStore{
		"missing bucket":     writefence.NewMinioConditionalStore(c, bucket+"-absent"),
		"wrong secret":       writefence.NewMinioConditionalStore(m.client(t, m.accessKey, wrongSecret), bucket),
		"stopped server":     writefence.NewMinioConditionalStore(stoppedClient, bucket),
		"unknown access key": writefence.NewMinioConditionalStore(m.client(t, "no-such-user", m.secretKey), bucket),
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			_, _, getErr := s.Get(t.Context(), "k")
			_, createErr := s.PutIfVersion(t.Context(), "k", []byte("x"), "")
			_, updateErr := s.PutIfVersion(t.Context(), "k", []byte("x"), "d41d8cd98f00b204e9800998ecf8427e")
			for _, err := range []error{getErr, createErr, updateErr, s.Delete(t.Context(), "k")} {
				require.Error(t, err)
				assert.NotErrorIs(t, err, writefence.ErrNotFound, "%v", err)
				assert.NotErrorIs(t, err, writefence.ErrConflict, "%v", err)
				assert.True(t, strings.HasPrefix(err.Error(), "writefence: s3 "), "%v", err)
				for _, secret := range []string{m.secretKey, wrongSecret} {
					assert.NotContains(t, err.Error(), secret)
				}
			}
			t.Logf("get: %v", getErr)
		})
	}
}
