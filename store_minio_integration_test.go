//go:build !writefence_nominio && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// The integration tests of the S3 adapter run against the S3 server named
// by WRITEFENCE_S3_ENDPOINT (MinIO under .ci/run). The checks they share
// with every store are the kit's (TestMinioConformance).

// newMinioBucket returns a client of the S3 server and a bucket of the
// test's own on it, removed with its objects when the test ends.
func newMinioBucket(t *testing.T) (*minio.Client, string) {
	t.Helper()
	c := testserver.S3Server(t).Client(t, nil)
	return c, testserver.MinioBucket(t, c)
}

// TestMinioConformance runs the kit over one bucket, its traffic counted
// and the adapter embedded in a wrapper of minioWrapper's type, with blobs
// in parts of S3's smallest size; a failed upload leaves no incomplete
// multipart upload behind. Get/UnderOverwrite, at its full 21,000 reads
// the longest of the checks, runs beside the others, on a bucket of its
// own (TestMinioUnderOverwrite).
func TestMinioConformance(t *testing.T) {
	t.Parallel()
	minioKit(t, kitAllBut(kitOverwrite))
}

// TestMinioUnderOverwrite runs the kit's Get/UnderOverwrite as
// TestMinioConformance runs the others.
func TestMinioUnderOverwrite(t *testing.T) {
	t.Parallel()
	minioKit(t, "^"+kitOverwrite)
}

// minioKit runs the kit's checks that only matches (Options.Only) as
// TestMinioConformance says, over a bucket of the test's own.
func minioKit(t *testing.T, only string) {
	wire := testserver.NewTransport(t)
	c := testserver.S3Server(t).Client(t, wire)
	bucket := testserver.MinioBucket(t, c)
	store := writefence.NewMinioStore(c, bucket)
	store.MaxObjectSize = kitReadLimit
	store.BlobPartSize = 5 << 20
	opts := kitOptions(testserver.DamageS3(c, bucket))
	opts.OverwriteReads = 0 // in full: see testserver.KitOverwriteReads
	opts.BlobPartSize = store.BlobPartSize
	opts.Wire = &writefencetest.Wire{Count: func() (int64, int64) { return wire.Requests(), wire.GetBytesRead() }}
	opts.Wrap = func(s writefence.ConditionalStore, o *writefencetest.Overrides) writefence.ConditionalStore {
		return minioWrapper{s.(*writefence.MinioStore), o}
	}
	opts.Only = only
	writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore { return store }, opts)
	for u := range c.ListIncompleteUploads(t.Context(), bucket, "", true) {
		require.NoError(t, u.Err)
		t.Errorf("an upload was left incomplete: %s", u.Key)
	}
}

// minioWrapper is a store that embeds the S3 adapter and overrides Get and
// PutIfVersion, as a quota or an audit log would (the kit's Fence/Overrides).
type minioWrapper struct {
	*writefence.MinioStore
	o *writefencetest.Overrides
}

func (w minioWrapper) Get(ctx context.Context, key string) ([]byte, string, error) {
	return w.o.Get(ctx, key, w.MinioStore.Get)
}

func (w minioWrapper) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return w.o.PutIfVersion(ctx, key, data, expect, w.MinioStore.PutIfVersion)
}

// TestMinioProtocol: the S3 answers the adapter classifies, on the real
// server: a version is an ETag without its quotes, and a second create is
// the server's 412, classified as ErrConflict.
func TestMinioProtocol(t *testing.T) {
	c, bucket := newMinioBucket(t)
	store := writefence.NewMinioStore(c, bucket)
	v1, err := store.PutIfVersion(t.Context(), "k", []byte("one"), "")
	require.NoError(t, err)
	assert.NotContains(t, v1, `"`)
	_, err = store.PutIfVersion(t.Context(), "k", []byte("other"), "")
	require.ErrorIs(t, err, writefence.ErrConflict)
	var resp minio.ErrorResponse
	require.ErrorAs(t, err, &resp)
	assert.Equal(t, 412, resp.StatusCode)
}

// TestMinioLargeRecordIsSinglePart writes a 17 MiB record, above
// minio-go's multipart threshold: a multipart ETag ends in "-<parts>", a
// single PUT's is a plain MD5.
func TestMinioLargeRecordIsSinglePart(t *testing.T) {
	t.Parallel()
	c, bucket := newMinioBucket(t)
	s := writefence.NewMinioStore(c, bucket)
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
	requireTooLarge(t, err, "big", 16<<20)
}

// s3LengthRequired starts a proxy to the S3 server at endpoint that
// answers as a stricter server does: 411 MissingContentLength to a
// request whose body has no Content-Length (HTTP chunked), and 501
// NotImplemented to an aws-chunked body, which it does not decode. It
// passes everything else through, its Host included, which the client
// signed. It returns the proxy's address and the count of its refusals.
func s3LengthRequired(t *testing.T, endpoint string) (string, *atomic.Int64) {
	t.Helper()
	refused := new(atomic.Int64)
	target := &url.URL{Scheme: "http", Host: endpoint}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		Transport: testserver.HTTPTransport(t),
	}
	refuse := func(w http.ResponseWriter, status int, code string) {
		refused.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>refused by the proxy</Message></Error>`, code)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.ContentLength < 0:
			refuse(w, http.StatusLengthRequired, "MissingContentLength")
		case strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked"),
			strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-"):
			refuse(w, http.StatusNotImplemented, "NotImplemented")
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), refused
}

// TestMinioRecordsNeedNoChunking writes and rewrites records of 0, 1 and
// a few KiB bytes, whole and in parts, and a small blob, through a proxy
// that refuses what a server requiring a length refuses: every write
// lands and reads back, and the proxy refused nothing.
func TestMinioRecordsNeedNoChunking(t *testing.T) {
	t.Parallel()
	s3 := testserver.S3Server(t)
	_, bucket := newMinioBucket(t)
	addr, refused := s3LengthRequired(t, s3.Endpoint)
	s3.Endpoint = addr
	s := writefence.NewMinioStore(s3.Client(t, testserver.HTTPTransport(t)), bucket)

	ctx := t.Context()
	for _, n := range []int{0, 1, 4<<10 + 3} {
		key := "record-" + strconv.Itoa(n)
		data := bytes.Repeat([]byte{'r'}, n)
		v1, err := s.PutIfVersion(ctx, key, data, "")
		require.NoError(t, err, "create %d bytes", n)
		got, v, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, v1, v)
		assert.Equal(t, data, got)

		again := bytes.Repeat([]byte{'s'}, n)
		v2, err := s.PutPartsIfVersion(ctx, key, [][]byte{again[:n/2], again[n/2:]}, v1)
		require.NoError(t, err, "update %d bytes in parts", n)
		got, v, err = s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, v2, v)
		assert.Equal(t, again, got)

		_, err = s.PutIfVersion(ctx, key, data, "")
		require.ErrorIs(t, err, writefence.ErrConflict, "a second create of %d bytes", n)
	}
	info, err := s.CreateBlob(ctx, "blob-0", bytes.NewReader(nil))
	require.NoError(t, err)
	assert.Zero(t, info.Size)
	assert.Zero(t, refused.Load(), "requests the proxy refused")

	// The proxy refuses what it says it does: minio-go's own PUT of an
	// empty object over plain HTTP, sent as aws-chunked with no length.
	_, err = minio.Core{Client: s3.Client(t, testserver.HTTPTransport(t))}.PutObject(ctx, bucket, "plain", bytes.NewReader(nil), 0, "", "", minio.PutObjectOptions{})
	require.Error(t, err)
	assert.Equal(t, http.StatusLengthRequired, minio.ToErrorResponse(err).StatusCode)
	assert.Equal(t, int64(1), refused.Load())
}

// TestMinioFailuresAreNeitherSentinel: a missing bucket, bad credentials
// and a stopped server are failures, never "not found" or "conflict", and
// the secret appears in none of them; bad credentials, and they alone,
// match fs.ErrPermission.
func TestMinioFailuresAreNeitherSentinel(t *testing.T) {
	m := testserver.S3Server(t)
	c, bucket := newMinioBucket(t)
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stoppedAddr := stopped.Addr().String()
	require.NoError(t, stopped.Close())
	stoppedClient, err := minio.New(stoppedAddr, &minio.Options{
		Creds:      credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""),
		MaxRetries: 2,
	})
	require.NoError(t, err)

	const wrongSecret = "wrong-secret-must-not-leak"
	stores := map[string]*writefence.MinioStore{
		"missing bucket":     writefence.NewMinioStore(c, bucket+"-absent"),
		"wrong secret":       writefence.NewMinioStore(testserver.S3{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: wrongSecret}.Client(t, nil), bucket),
		"stopped server":     writefence.NewMinioStore(stoppedClient, bucket),
		"unknown access key": writefence.NewMinioStore(testserver.S3{Endpoint: m.Endpoint, AccessKey: "no-such-user", SecretKey: m.SecretKey}.Client(t, nil), bucket),
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			_, _, getErr := s.Get(t.Context(), "k")
			_, createErr := s.PutIfVersion(t.Context(), "k", []byte("x"), "")
			_, updateErr := s.PutIfVersion(t.Context(), "k", []byte("x"), "d41d8cd98f00b204e9800998ecf8427e")
			refused := strings.Contains(name, "secret") || strings.Contains(name, "access key")
			for _, err := range []error{getErr, createErr, updateErr, s.Delete(t.Context(), "k")} {
				require.Error(t, err)
				assert.NotErrorIs(t, err, writefence.ErrNotFound, "%v", err)
				assert.NotErrorIs(t, err, writefence.ErrConflict, "%v", err)
				assert.Equal(t, refused, errors.Is(err, fs.ErrPermission), "refused credentials match fs.ErrPermission: %v", err)
				assert.True(t, strings.HasPrefix(err.Error(), "writefence: s3 "), "%v", err)
				for _, secret := range []string{m.SecretKey, wrongSecret} {
					assert.NotContains(t, err.Error(), secret)
				}
			}
			t.Logf("get: %v", getErr)
		})
	}
}

// TestMinioPermissionIsFinal: a Push whose credentials the server refuses
// (a wrong secret, an unknown access key) returns an error matching
// fs.ErrPermission after exactly one request, never an unknown outcome:
// the refused request was not carried out and nothing retries it. Both
// the read of a cold Fence and the write of a Fence that remembers the
// record's version (no read first) are refused so.
func TestMinioPermissionIsFinal(t *testing.T) {
	ctx := t.Context()
	m := testserver.S3Server(t)
	_, bucket := newMinioBucket(t)
	creds := &switchableCreds{}
	wire := testserver.NewTransport(t)
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.New(creds), Transport: wire, Region: "us-east-1"})
	require.NoError(t, err)
	store := writefence.NewMinioStore(c, bucket)
	prefix := testserver.UniqueName(t) + "/"

	const wrongSecret = "wrong-secret-must-not-leak"
	for i, bad := range []struct{ name, access, secret string }{
		{"wrong secret", m.AccessKey, wrongSecret},
		{"unknown access key", "no-such-user", m.SecretKey},
	} {
		t.Run(bad.name, func(t *testing.T) {
			shard := strconv.Itoa(i)
			epoch := uint64(10 * (i + 1))
			creds.set(m.AccessKey, m.SecretKey)
			warm := &writefence.Fence{Store: store, Prefix: prefix, RetryDelay: time.Millisecond}
			require.NoError(t, warm.Push(ctx, "wal", shard, "w", epoch, []byte("landed")))
			creds.set(bad.access, bad.secret)

			for _, tc := range []struct {
				name   string
				f      *writefence.Fence
				writes int64
			}{
				{"write on the remembered version", warm, 1},
				{"cold read", &writefence.Fence{Store: store, Prefix: prefix, RetryDelay: time.Millisecond}, 0},
			} {
				reqs, writes := wire.Requests(), wire.Writes()
				err := tc.f.Push(ctx, "wal", shard, "w", epoch+1, []byte("refused"))
				t.Logf("%s: %v", tc.name, err)
				require.ErrorIs(t, err, fs.ErrPermission, tc.name)
				assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, tc.name)
				var resp minio.ErrorResponse
				require.ErrorAs(t, err, &resp, "%s: the server's answer stays reachable", tc.name)
				assert.Equal(t, http.StatusForbidden, resp.StatusCode, tc.name)
				assert.Equal(t, int64(1), wire.Requests()-reqs, "%s: one attempt, one request", tc.name)
				assert.Equal(t, tc.writes, wire.Writes()-writes, tc.name)
				assert.NotContains(t, err.Error(), wrongSecret)
			}

			creds.set(m.AccessKey, m.SecretKey)
			got, _, payload, err := (&writefence.Fence{Store: store, Prefix: prefix}).Latest(ctx, "wal", shard)
			require.NoError(t, err)
			assert.Equal(t, epoch, got, "nothing was written")
			assert.Equal(t, "landed", string(payload))
		})
	}
}

// switchableCreds is a credentials provider whose keys a test changes
// between requests: the client asks for them afresh for every request.
type switchableCreds struct {
	mu sync.Mutex // guards v
	v  credentials.Value
}

func (c *switchableCreds) set(access, secret string) {
	c.mu.Lock()
	c.v = credentials.Value{AccessKeyID: access, SecretAccessKey: secret, SignerType: credentials.SignatureV4}
	c.mu.Unlock()
}

func (c *switchableCreds) Retrieve() (credentials.Value, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.v, nil
}

func (c *switchableCreds) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	return c.Retrieve()
}

func (c *switchableCreds) IsExpired() bool { return true }

// TestMinioBlobMemory: a 40 MiB blob streamed in 16 MiB parts allocates
// no more than two parts.
func TestMinioBlobMemory(t *testing.T) {
	c, bucket := newMinioBucket(t)
	store := writefence.NewMinioStore(c, bucket)
	testBlobMemory(t, store, 2*16<<20)
}

// TestMinioCommitManyBlobs: see testCommitManyBlobs.
func TestMinioCommitManyBlobs(t *testing.T) {
	t.Parallel()
	wire := testserver.NewTransport(t)
	c := testserver.S3Server(t).Client(t, wire)
	store := writefence.NewMinioStore(c, testserver.MinioBucket(t, c))
	testCommitManyBlobs(t, store, func() (int64, int64) { return wire.Requests(), wire.Writes() })
}

// TestMinioCollectManyBlobs: a Collect that deletes 10,000 blobs, each
// uncommittable (written by a deposed writer), lists the shard's blob
// space once, in pages of 1,000 (the most an S3 listing returns; MinIO
// answers the last full page as truncated, so an eleventh, empty page
// follows), and deletes the blobs with one DeleteObjects request per
// 1,000 (the most S3 takes), each right after a ranged read of the
// record that checks it still holds the tenure the deletes rely on;
// besides, it reads the store's clock (the PUT and the HEAD of a fresh
// blob, and its DELETE) and the record.
func TestMinioCollectManyBlobs(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 10,000 objects")
	}
	t.Parallel()
	const n = 10_000
	ctx := t.Context()
	wire := testserver.NewTransport(t)
	c := testserver.S3Server(t).Client(t, wire)
	bucket := testserver.MinioBucket(t, c)
	store := writefence.NewMinioStore(c, bucket)
	f := &writefence.Fence{Store: store, Prefix: testserver.UniqueName(t) + "/"}
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 5, []byte("b's manifest")))
	space, err := keys.Blobs(f.Prefix, "wal", "0")
	require.NoError(t, err)

	// a's blobs of epoch 3, below b's tenure: garbage at once. Raw PUTs,
	// 32 at a time, as PutBlob would leave them.
	names := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for name := range names {
				_, err := c.PutObject(ctx, bucket, space+name, strings.NewReader("x"), 1, minio.PutObjectOptions{})
				assert.NoError(t, err)
			}
		})
	}
	for i := range n {
		names <- keys.BlobName(3, "a", fmt.Sprintf("%032x", i))
	}
	close(names)
	wg.Wait()

	before, reqs := wire.Kinds(), wire.Requests()
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{})
	require.NoError(t, err)
	after := wire.Kinds()
	kinds := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			kinds[k] = d
		}
	}
	t.Logf("a Collect deleting %d blobs: %d requests: %v", len(report.Deleted), wire.Requests()-reqs, kinds)
	assert.Len(t, report.Deleted, n)
	pages := kinds["LIST"]
	assert.Contains(t, []int64{n / 1000, n/1000 + 1}, pages, "the listing's pages")
	assert.Equal(t, map[string]int64{"LIST": pages, "POST": n / 1000, "PUT": 1, "HEAD": 1, "DELETE": 1, "GET": 1 + (n+9999)/10000}, kinds,
		"requests by kind: the listing's pages, the DeleteObjects, the clock blob's PUT, HEAD and DELETE, the record's GET and one before each 10 DeleteObjects")
	assert.LessOrEqual(t, wire.Requests()-reqs-pages, int64(15), "requests beside the listing's pages")
	var left int
	require.NoError(t, store.ListBlobs(ctx, space, func(writefence.BlobInfo) error { left++; return nil }))
	assert.Zero(t, left, "blobs left")
}

// s3PutTap is an http.RoundTripper in front of the S3 server that
// records the headers of every PUT and, while damage is set, changes one
// byte in the middle of a PUT's body on its way, its headers kept.
type s3PutTap struct {
	base   http.RoundTripper
	damage atomic.Bool

	mu   sync.Mutex // guards puts
	puts []http.Header
}

func (p *s3PutTap) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut {
		return p.base.RoundTrip(r)
	}
	h := r.Header.Clone()
	h.Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
	if len(r.TransferEncoding) > 0 {
		h.Set("Transfer-Encoding", strings.Join(r.TransferEncoding, ","))
	}
	p.mu.Lock()
	p.puts = append(p.puts, h)
	p.mu.Unlock()
	if p.damage.Load() && r.Body != nil && r.ContentLength > 0 {
		r = r.Clone(r.Context())
		r.Body = &damagedBody{r: r.Body, at: r.ContentLength / 2}
	}
	return p.base.RoundTrip(r)
}

// taken returns the headers of the PUTs sent since the last call.
func (p *s3PutTap) taken() []http.Header {
	p.mu.Lock()
	defer p.mu.Unlock()
	puts := p.puts
	p.puts = nil
	return puts
}

// damagedBody is a request body whose byte at offset at is inverted.
type damagedBody struct {
	r   io.ReadCloser
	off int64
	at  int64
}

func (b *damagedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if i := b.at - b.off; i >= 0 && i < int64(n) {
		p[i] ^= 0xff
	}
	b.off += int64(n)
	return n, err
}

func (b *damagedBody) Close() error { return b.r.Close() }

// TestMinioBlobCRC32C: MinIO refuses a wrong x-amz-checksum-crc32c, so
// the store's first one-PUT blob, its test, is refused and sent again
// with its CRC-32C alone, and every later one goes as one PUT of its
// exact length with its CRC-32C and no MD5, never aws-chunked, with or
// without the client's checksum trailers, signed (64 KiB) or not (4 MiB).
// A body changed on its way, its headers kept, is refused, and nothing
// is stored, whether it is the first blob of the store or a later one.
func TestMinioBlobCRC32C(t *testing.T) {
	t.Parallel()
	s3 := testserver.S3Server(t)
	for _, trailing := range []bool{false, true} {
		for _, n := range []int{64 << 10, 4 << 20} {
			t.Run(fmt.Sprintf("trailing=%t/%d", trailing, n), func(t *testing.T) {
				t.Parallel()
				tap := &s3PutTap{base: testserver.HTTPTransport(t)}
				c, err := minio.New(s3.Endpoint, &minio.Options{
					Creds:           credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, ""),
					Transport:       tap,
					Region:          "us-east-1",
					TrailingHeaders: trailing,
				})
				require.NoError(t, err)
				bucket := testserver.MinioBucket(t, c)
				ctx := t.Context()
				body := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, n) }
				crc := func(b []byte) string {
					return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))))
				}
				sha := func(b []byte) string { sum := sha256.Sum256(b); return hex.EncodeToString(sum[:]) }
				assertStored := func(key string, want []byte) {
					t.Helper()
					got, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
					require.NoError(t, err)
					defer got.Close()
					data, err := io.ReadAll(got)
					require.NoError(t, err)
					assert.True(t, bytes.Equal(want, data), "%s: the bytes stored are the bytes sent", key)
				}
				// The digest that finds the damage: the signed SHA-256 of a
				// blob under 1 MiB or of the test, else the CRC-32C.
				assertAbsent := func(key string, err error, codes ...string) {
					t.Helper()
					require.Error(t, err)
					assert.NotErrorIs(t, err, writefence.ErrConflict)
					var r minio.ErrorResponse
					require.ErrorAs(t, err, &r)
					if n < 1<<20 {
						codes = []string{"XAmzContentSHA256Mismatch"}
					}
					assert.Contains(t, codes, r.Code, "refused for its digest: %v", err)
					_, statErr := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
					assert.Equal(t, minio.NoSuchKey, minio.ToErrorResponse(statErr).Code, "%s: nothing stored", key)
				}

				// The first blob of a store, damaged: refused, nothing stored.
				s := writefence.NewMinioStore(c, bucket)
				tap.damage.Store(true)
				_, err = s.WriteBlob(ctx, "damaged-first", bytes.NewReader(body(0)))
				assertAbsent("damaged-first", err, "XAmzContentSHA256Mismatch")
				tap.damage.Store(false)
				tap.taken()

				// A fresh store: its first blob tests the server.
				s = writefence.NewMinioStore(c, bucket)
				size, err := s.WriteBlob(ctx, "first", bytes.NewReader(body(1)))
				require.NoError(t, err)
				assert.Equal(t, int64(n), size)
				puts := tap.taken()
				require.Len(t, puts, 2, "the test, refused, then the blob")
				assert.Empty(t, puts[0].Get("Content-Md5"), "the test carries no MD5")
				assert.Equal(t, sha(body(1)), puts[0].Get("X-Amz-Content-Sha256"), "the test's SHA-256 is signed")
				assert.NotEqual(t, crc(body(1)), puts[0].Get(s3CRC32C), "the test carries a wrong CRC-32C")
				assertStored("first", body(1))

				for i, put := range append(puts[1:], nil) {
					if put == nil {
						_, err := s.WriteBlob(ctx, "later", bytes.NewReader(body(2)))
						require.NoError(t, err)
						later := tap.taken()
						require.Len(t, later, 1, "a later blob is one PUT")
						put = later[0]
						assertStored("later", body(2))
					}
					want := body(1 + i)
					assert.Equal(t, crc(want), put.Get(s3CRC32C), "the body's CRC-32C")
					assert.Empty(t, put.Get("Content-Md5"), "no MD5")
					assert.Equal(t, strconv.Itoa(n), put.Get("Content-Length"))
					assert.Empty(t, put.Get("Transfer-Encoding"))
					assert.NotContains(t, put.Get("Content-Encoding"), "aws-chunked")
					assert.Empty(t, put.Get("X-Amz-Decoded-Content-Length"), "not aws-chunked")
					assert.Empty(t, put.Get("X-Amz-Trailer"), "no trailer")
					assert.False(t, strings.HasPrefix(put.Get("X-Amz-Content-Sha256"), "STREAMING-"))
				}

				// A later blob, damaged: refused, nothing stored.
				tap.damage.Store(true)
				_, err = s.WriteBlob(ctx, "damaged-later", bytes.NewReader(body(3)))
				assertAbsent("damaged-later", err, "XAmzContentChecksumMismatch")
				require.Len(t, tap.taken(), 1, "refused, and not sent again")
			})
		}
	}
}

// s3CRC32C is the header of a body's CRC-32C.
const s3CRC32C = "X-Amz-Checksum-Crc32c"

// s3DeleteReply is an http.RoundTripper in front of the S3 server that
// passes DeleteObjects to the server and rewrites its reply's body with
// rewrite: a reply that names other keys than the server deleted.
type s3DeleteReply struct {
	base    http.RoundTripper
	rewrite func(body string) string
}

func (p *s3DeleteReply) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || !r.URL.Query().Has("delete") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	out := p.rewrite(string(body))
	resp.Body = io.NopCloser(strings.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// TestMinioDeleteBlobsAnswersOnlyForKeysAsked: DeleteBlobs of three
// blobs on the real server, whose DeleteObjects reply is rewritten to
// name the first key in place of the second, or a key never asked in its
// place: DeleteBlobs returns only keys it was given, each once, and a
// *StoreError naming the second, which no reply accounts for
// (BlobBatchDeleter's contract), though the server deleted all three.
func TestMinioDeleteBlobsAnswersOnlyForKeysAsked(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		with func(keys []string) string
	}{
		{"the first key twice", func(keys []string) string { return keys[0] }},
		{"a key never asked", func(keys []string) string { return keys[1] + "-other" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			tap := &s3DeleteReply{base: testserver.HTTPTransport(t)}
			c := testserver.S3Server(t).Client(t, tap)
			store := writefence.NewMinioStore(c, testserver.MinioBucket(t, c))
			prefix := testserver.UniqueName(t) + "/"
			keys := []string{prefix + "1", prefix + "2", prefix + "3"}
			for _, k := range keys {
				_, err := store.CreateBlob(ctx, k, strings.NewReader(k))
				require.NoError(t, err)
			}
			tap.rewrite = func(body string) string {
				return strings.Replace(body, "<Key>"+keys[1]+"</Key>", "<Key>"+tt.with(keys)+"</Key>", 1)
			}

			deleted, err := store.DeleteBlobs(ctx, keys)
			assert.ElementsMatch(t, []string{keys[0], keys[2]}, deleted)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se, "the second key is not accounted for")
			assert.Equal(t, keys[1], se.Key)
			for _, k := range keys {
				_, err := store.StatBlob(ctx, k)
				require.ErrorIs(t, err, writefence.ErrNotFound, "the server deleted %s", k)
			}
		})
	}
}

// The example needs an S3 server, so it is compiled but not run.
func ExampleNewMinioConditionalStore() {
	client, err := minio.New("s3.example.com", &minio.Options{
		Creds:  credentials.NewEnvAWS(),
		Secure: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fence := &writefence.Fence{Store: writefence.NewMinioConditionalStore(client, "mirrors", nil)}

	// epoch comes from whatever elects this process as the shard's writer.
	var epoch uint64 = 7
	err = fence.Push(context.Background(), "wal", "shard-0001", "node-a", epoch, []byte("segment"))
	switch {
	case errors.Is(err, writefence.ErrStaleEpoch):
		log.Print("deposed: a newer writer owns the shard")
	case err != nil:
		log.Fatal(err)
	}
}

// TestMinioCommitAfterEscapedKeys: see testCommitAfterEscapedKeys.
func TestMinioCommitAfterEscapedKeys(t *testing.T) {
	t.Parallel()
	mc := testserver.S3Server(t).Client(t, nil)
	testCommitAfterEscapedKeys(t, writefence.NewMinioStore(mc, testserver.MinioBucket(t, mc)))
}
