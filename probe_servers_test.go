//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"
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

// proxiedStore is a store over a bucket of its own on a real server,
// reached through a precondition proxy, the same bucket reached directly,
// and the bucket's objects as the server's SDK lists them directly.
type proxiedStore struct {
	store   writefence.ConditionalStore
	direct  writefence.ConditionalStore
	proxy   *preconditionProxy
	objects func() []string
}

// openProxiedMinio: the client behind the proxy is anonymous, in a bucket
// whose policy lets anyone read, write and delete objects, because S3
// signs the precondition headers: a proxy that stripped them from a signed
// request would be refused for a bad signature, not ignored.
func openProxiedMinio(t *testing.T, strip bool) proxiedStore {
	s3 := testserver.S3Server(t)
	admin := s3.Client(t, nil)
	bucket := testserver.MinioBucket(t, admin)
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},` +
		`"Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],"Resource":["arn:aws:s3:::` + bucket + `/*"]}]}`
	require.NoError(t, admin.SetBucketPolicy(t.Context(), bucket, policy))
	proxy := newPreconditionProxy(t, "http://"+s3.Endpoint, strip)
	client := testserver.S3{Endpoint: proxy.srv.Listener.Addr().String()}.Client(t, testserver.HTTPTransport(t))
	objects := func() []string {
		var keys []string
		for o := range admin.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
			require.NoError(t, o.Err)
			keys = append(keys, o.Key)
		}
		return keys
	}
	return proxiedStore{
		store:   writefence.NewMinioStore(client, bucket),
		direct:  writefence.NewMinioStore(admin, bucket),
		proxy:   proxy,
		objects: objects,
	}
}

func openProxiedGCS(t *testing.T, strip bool) proxiedStore {
	endpoint := testserver.GCSEndpoint(t)
	direct := testserver.GCSClient(t, endpoint, nil)
	bucket := testserver.GCSBucket(t, direct)
	proxy := newPreconditionProxy(t, endpoint, strip)
	client := testserver.GCSClient(t, proxy.srv.URL, nil)
	objects := func() []string {
		var names []string
		for it := direct.Bucket(bucket).Objects(t.Context(), nil); ; {
			attrs, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return names
			}
			require.NoError(t, err)
			names = append(names, attrs.Name)
		}
	}
	return proxiedStore{
		store:   writefence.NewGCSStore(client, bucket),
		direct:  writefence.NewGCSStore(direct, bucket),
		proxy:   proxy,
		objects: objects,
	}
}

// TestProbeThroughProxy probes each HTTP adapter's real server directly,
// through a proxy that passes the preconditions and through one that
// strips them; a Fence with Probe set refuses to write over the latter.
func TestProbeThroughProxy(t *testing.T) {
	for _, a := range []struct {
		name string
		open func(t *testing.T, strip bool) proxiedStore
	}{{"minio", openProxiedMinio}, {"gcs", openProxiedGCS}} {
		t.Run(a.name+"/direct", func(t *testing.T) {
			s := a.open(t, false)
			require.NoError(t, writefence.Probe(t.Context(), s.direct, "probe"))
			assert.Empty(t, s.objects(), "the probe cleans up")
		})
		t.Run(a.name+"/proxy passing conditions", func(t *testing.T) {
			s := a.open(t, false)
			require.NoError(t, writefence.Probe(t.Context(), s.store, "probe"))
			assert.Zero(t, s.proxy.stripped.Load())
		})
		t.Run(a.name+"/proxy stripping conditions", func(t *testing.T) {
			s := a.open(t, true)
			err := writefence.Probe(t.Context(), s.store, "probe")
			require.ErrorIs(t, err, writefence.ErrUntrustedStore)
			var pe *writefence.ProbeError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, probecheck.CreateRefused, pe.Check)
			assert.Positive(t, s.proxy.stripped.Load())
			assert.Empty(t, s.objects(), "the probe cleans up")
			t.Log(err)
		})
		t.Run(a.name+"/fence over stripping proxy", func(t *testing.T) {
			s := a.open(t, true)
			f := &writefence.Fence{Store: s.store, Probe: true}
			err := f.Push(t.Context(), "wal", "0", "w", 1, []byte("x"))
			require.ErrorIs(t, err, writefence.ErrUntrustedStore)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: untrusted store: "), err.Error())
			assert.Empty(t, s.objects(), "no record and no scratch object")
			require.ErrorIs(t, f.Push(t.Context(), "wal", "0", "w", 2, []byte("x")), writefence.ErrUntrustedStore)
			assert.Empty(t, s.objects())
		})
	}
}

func TestProbeValkey(t *testing.T) {
	addr := testserver.ValkeyAddr(t)
	c := testserver.ValkeyClient(t, addr, "")
	prefix := testserver.ValkeyPrefix(t, addr)
	for _, script := range []bool{false, true} {
		t.Run(fmt.Sprintf("script=%t", script), func(t *testing.T) {
			store := writefence.NewValkeyStore(c)
			store.Script = script
			require.NoError(t, writefence.Probe(t.Context(), store, prefix+"probe"))
			keys, err := c.Keys(t.Context(), prefix+"*").Result()
			require.NoError(t, err)
			assert.Empty(t, keys, "the probe cleans up")
		})
	}
}
