package writefence_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/probecheck"
	"github.com/writefence/writefence/internal/testserver"
)

// The probe against real servers behind a proxy that makes them ignore
// preconditions, as some S3-compatible services do: the server is honest,
// the request it receives no longer carries the condition.

// preconditionProxy forwards to target and, while strip is set, removes the
// S3 precondition headers and the GCS ifGenerationMatch parameter. It counts
// the conditions it removed, so a test can tell the proxy was in the path.
type preconditionProxy struct {
	srv      *httptest.Server
	strip    atomic.Bool
	stripped atomic.Int64
}

func newPreconditionProxy(t *testing.T, target string, strip bool) *preconditionProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &preconditionProxy{}
	p.strip.Store(strip)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u) // also sets Host to the target's, as the GCS emulator's reads require
		if !p.strip.Load() {
			return
		}
		for _, h := range []string{"If-Match", "If-None-Match"} {
			if r.Out.Header.Get(h) != "" {
				r.Out.Header.Del(h)
				p.stripped.Add(1)
			}
		}
		q := r.Out.URL.Query()
		if q.Has("ifGenerationMatch") {
			q.Del("ifGenerationMatch")
			r.Out.URL.RawQuery = q.Encode()
			p.stripped.Add(1)
		}
	}}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

// newAnonymousMinioBucket returns a bucket of its own on the real server
// that anonymous clients may read, write and delete objects in, and a
// client that reaches it through a proxy. The client is anonymous because
// S3 signs the precondition headers: a proxy that stripped them from a
// signed request would be refused for a bad signature, not ignored.
func newAnonymousMinioBucket(t *testing.T, strip bool) (*writefence.MinioConditionalStore, *preconditionProxy, *minio.Client, string) {
	t.Helper()
	admin, bucket := newMinioBucket(t)
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},` +
		`"Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],"Resource":["arn:aws:s3:::` + bucket + `/*"]}]}`
	require.NoError(t, admin.SetBucketPolicy(t.Context(), bucket, policy))

	proxy := newPreconditionProxy(t, "http://"+testserver.S3Server(t).Endpoint, strip)
	client, err := minio.New(proxy.srv.Listener.Addr().String(), &minio.Options{
		Creds:     credentials.NewStaticV4("", "", ""),
		Region:    "us-east-1",
		Transport: closingTransport(t),
	})
	require.NoError(t, err)
	return writefence.NewMinioConditionalStore(client, bucket), proxy, admin, bucket
}

// closingTransport returns a transport for an SDK client whose idle
// keep-alive connections are closed when the test ends, so none of its
// goroutines outlives the test.
func closingTransport(t *testing.T) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func minioObjects(t *testing.T, c *minio.Client, bucket string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, o.Err)
		keys = append(keys, o.Key)
	}
	return keys
}

func TestProbeMinio(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		c, bucket := newMinioBucket(t)
		require.NoError(t, writefence.Probe(t.Context(), writefence.NewMinioConditionalStore(c, bucket), "probe"))
		assert.Empty(t, minioObjects(t, c, bucket), "the probe cleans up")
	})
	t.Run("proxy passing conditions", func(t *testing.T) {
		store, proxy, _, _ := newAnonymousMinioBucket(t, false)
		require.NoError(t, writefence.Probe(t.Context(), store, "probe"))
		assert.Zero(t, proxy.stripped.Load())
	})
	t.Run("proxy stripping conditions", func(t *testing.T) {
		store, proxy, admin, bucket := newAnonymousMinioBucket(t, true)
		err := writefence.Probe(t.Context(), store, "probe")
		require.ErrorIs(t, err, writefence.ErrUntrustedStore)
		var pe *writefence.ProbeError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, probecheck.CreateRefused, pe.Check)
		assert.Positive(t, proxy.stripped.Load())
		assert.Empty(t, minioObjects(t, admin, bucket), "the probe cleans up")
		t.Log(err)
	})
	t.Run("fence over stripping proxy", func(t *testing.T) {
		store, _, admin, bucket := newAnonymousMinioBucket(t, true)
		f := &writefence.Fence{Store: store, Probe: true}
		err := f.Push(t.Context(), "wal", "0", "w", 1, []byte("x"))
		require.ErrorIs(t, err, writefence.ErrUntrustedStore)
		assert.Empty(t, minioObjects(t, admin, bucket), "no record and no scratch object")
		require.ErrorIs(t, f.Push(t.Context(), "wal", "0", "w", 2, []byte("x")), writefence.ErrUntrustedStore)
		assert.Empty(t, minioObjects(t, admin, bucket))
	})
}

// gcsProxiedStore returns a store over a bucket of its own on the emulator,
// reached through a proxy, and the bucket handle of a direct client.
func gcsProxiedStore(t *testing.T, strip bool) (*writefence.GCSConditionalStore, *preconditionProxy, *storage.BucketHandle) {
	t.Helper()
	_, bucket := newGCSIntegrationStore(t)
	proxy := newPreconditionProxy(t, serverEnv(t, "WRITEFENCE_GCS_ENDPOINT"), strip)
	client := testserver.GCSClient(t, proxy.srv.URL, nil)
	return writefence.NewGCSConditionalStore(client, bucket.BucketName()), proxy, bucket
}

func gcsObjects(t *testing.T, bucket *storage.BucketHandle) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	it := bucket.Objects(ctx, nil)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return names
		}
		require.NoError(t, err)
		names = append(names, attrs.Name)
	}
}

func TestProbeGCS(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		store, bucket := newGCSIntegrationStore(t)
		require.NoError(t, writefence.Probe(t.Context(), store, "probe"))
		assert.Empty(t, gcsObjects(t, bucket), "the probe cleans up")
	})
	t.Run("proxy passing conditions", func(t *testing.T) {
		store, proxy, _ := gcsProxiedStore(t, false)
		require.NoError(t, writefence.Probe(t.Context(), store, "probe"))
		assert.Zero(t, proxy.stripped.Load())
	})
	t.Run("proxy stripping conditions", func(t *testing.T) {
		store, proxy, bucket := gcsProxiedStore(t, true)
		err := writefence.Probe(t.Context(), store, "probe")
		require.ErrorIs(t, err, writefence.ErrUntrustedStore)
		var pe *writefence.ProbeError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, probecheck.CreateRefused, pe.Check)
		assert.Positive(t, proxy.stripped.Load())
		assert.Empty(t, gcsObjects(t, bucket), "the probe cleans up")
		t.Log(err)
	})
	t.Run("fence over stripping proxy", func(t *testing.T) {
		store, _, bucket := gcsProxiedStore(t, true)
		f := &writefence.Fence{Store: store, Probe: true}
		err := f.Push(t.Context(), "wal", "0", "w", 1, []byte("x"))
		require.ErrorIs(t, err, writefence.ErrUntrustedStore)
		assert.True(t, strings.HasPrefix(err.Error(), "writefence: untrusted store: "), err.Error())
		assert.Empty(t, gcsObjects(t, bucket), "no record and no scratch object")
	})
}

func TestProbeValkey(t *testing.T) {
	c := newValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			require.NoError(t, writefence.Probe(t.Context(), store, prefix+"probe"))
			keys, err := c.Keys(t.Context(), prefix+"*").Result()
			require.NoError(t, err)
			assert.Empty(t, keys, "the probe cleans up")
		})
	}
}
