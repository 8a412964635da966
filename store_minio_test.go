//go:build !writefence_nominio && !writefence_nosdk

package writefence

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
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
)

// The unit tests of the S3 adapter: the adapter over a fake of the part of
// minio-go it uses, and over the real client talking to a local HTTP
// server that records the requests it receives.

// The fake server's credentials. The secret must never appear in an error.
const (
	s3FakeAccessKey = "AKIAWRITEFENCETEST"
	s3FakeSecret    = "fake-secret-must-not-leak-7d3e"
)

// s3Seen is one request as the fake S3 server received it.
type s3Seen struct {
	method string
	path   string
	query  string
	header http.Header
	body   int64  // bytes of body received (after any aws-chunked framing)
	length int64  // the request's Content-Length; -1 when it had none (chunked)
	crc    string // the CRC-32C of the body received, as x-amz-checksum-crc32c carries it
}

// s3Fake is an httptest server that speaks just enough S3 for the adapter:
// it records every request and answers with the handler the test gave it.
type s3Fake struct {
	srv *httptest.Server

	mu   sync.Mutex // guards seen
	seen []s3Seen
}

func newS3Fake(t *testing.T, handle http.HandlerFunc) *s3Fake {
	t.Helper()
	f := &s3Fake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(data))
		f.mu.Lock()
		f.seen = append(f.seen, s3Seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), int64(len(data)), r.ContentLength, s3CRC32COf(data)})
		f.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *s3Fake) requests() []s3Seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]s3Seen(nil), f.seen...)
}

// store returns an adapter over bucket "bucket" of the fake server. retries is
// minio-go's MaxRetries (1 means a single attempt).
func (f *s3Fake) store(t *testing.T, retries int) *minioStore {
	t.Helper()
	return newMinioStore(s3FakeClient(t, f.srv.Listener.Addr().String(), retries, false), "bucket", nil)
}

// trailingStore is store(t, 1) over a client that, with trailing, adds
// checksum trailers where minio-go can (TrailingHeaders).
func (f *s3Fake) trailingStore(t *testing.T, trailing bool) *minioStore {
	t.Helper()
	return newMinioStore(s3FakeClient(t, f.srv.Listener.Addr().String(), 1, trailing), "bucket", nil)
}

func s3FakeClient(t *testing.T, addr string, retries int, trailing bool) *minio.Client {
	t.Helper()
	c, err := minio.New(addr, &minio.Options{
		Creds:           credentials.NewStaticV4(s3FakeAccessKey, s3FakeSecret, ""),
		Region:          "us-east-1", // skips the bucket-location request
		MaxRetries:      retries,
		TrailingHeaders: trailing,
	})
	require.NoError(t, err)
	return c
}

func writeS3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>%s</Code><Message>%s from the fake server</Message><Key>k</Key><BucketName>bucket</BucketName><RequestId>r1</RequestId></Error>`,
		code, code)
}

// writeS3Object answers a GET with body and etag as S3 does.
func writeS3Object(w http.ResponseWriter, body, etag string) {
	w.Header().Set("ETag", etag)
	w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	io.WriteString(w, body)
}

func assertNeitherSentinel(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrConflict)
	assert.NotErrorIs(t, err, ErrNotFound)
	var se *StoreError
	assert.ErrorAs(t, err, &se)
	assert.True(t, strings.HasPrefix(err.Error(), "writefence: s3 "), "error %q lacks the adapter's prefix", err)
	assert.NotContains(t, err.Error(), s3FakeSecret)
}

func TestMinioStoreSendsPreconditionHeaders(t *testing.T) {
	tests := []struct {
		name        string
		expect      string
		ifMatch     string
		ifNoneMatch string
	}{
		{name: "create-only", expect: "", ifNoneMatch: "*"},
		{name: "update", expect: "9b2cf535f27731c974343645a3985328", ifMatch: `"9b2cf535f27731c974343645a3985328"`},
		{name: "multipart etag", expect: "d41d8cd98f00b204e9800998ecf8427e-3", ifMatch: `"d41d8cd98f00b204e9800998ecf8427e-3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"new-etag"`)
			})
			v, err := f.store(t, 1).PutIfVersion(t.Context(), "k", []byte("record"), tt.expect)
			require.NoError(t, err)
			assert.Equal(t, "new-etag", v, "the new version is the response's ETag without quotes")

			seen := f.requests()
			require.Len(t, seen, 1)
			assert.Equal(t, http.MethodPut, seen[0].method)
			assert.Equal(t, "/bucket/k", seen[0].path)
			assert.Equal(t, tt.ifMatch, seen[0].header.Get("If-Match"))
			assert.Equal(t, tt.ifNoneMatch, seen[0].header.Get("If-None-Match"))
		})
	}
}

// TestMinioStoreWritesSinglePart writes a record above minio-go's 16 MiB
// multipart threshold and checks it went out as one PUT of its exact size.
func TestMinioStoreWritesSinglePart(t *testing.T) {
	const size = 17 << 20
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.RawQuery != "" {
			writeS3Error(w, http.StatusNotImplemented, "NotImplemented")
			return
		}
		w.Header().Set("ETag", `"single"`)
	})
	s := f.store(t, 1)
	s.MaxObjectSize = size
	v, err := s.PutIfVersion(t.Context(), "big", make([]byte, size), "")
	require.NoError(t, err)
	assert.Equal(t, "single", v)

	seen := f.requests()
	require.Len(t, seen, 1, "a record must be one request, not a multipart upload")
	assert.Equal(t, http.MethodPut, seen[0].method)
	assert.Empty(t, seen[0].query, "no ?uploads, ?partNumber or ?uploadId")
	assert.Equal(t, "*", seen[0].header.Get("If-None-Match"))
	declared := seen[0].header.Get("X-Amz-Decoded-Content-Length")
	if declared == "" {
		declared = seen[0].header.Get("Content-Length")
	}
	assert.Equal(t, strconv.Itoa(size), declared)
	assert.GreaterOrEqual(t, seen[0].body, int64(size))
}

// TestMinioRecordHasContentLength: a record of any size, an empty one
// included, is one PUT whose Content-Length is its size, its body whole
// (neither HTTP chunked nor aws-chunked), carrying its SHA-256, signed, and
// its MD5; over plain HTTP, with the client as minio-go builds it by
// default and with TrailingHeaders, which would add a checksum trailer.
func TestMinioRecordHasContentLength(t *testing.T) {
	for _, trailing := range []bool{false, true} {
		for _, n := range []int{0, 1, 4<<10 + 3} {
			for _, parts := range []int{1, 3} {
				t.Run(fmt.Sprintf("trailing=%v/%d bytes/%d parts", trailing, n, parts), func(t *testing.T) {
					f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
						w.Header().Set("ETag", `"e"`)
					})
					data := make([]byte, n)
					for i := range data {
						data[i] = byte(i)
					}
					split := [][]byte{data}
					if parts == 3 {
						split = [][]byte{data[:n/3], data[n/3 : 2*n/3], data[2*n/3:]}
					}
					_, err := f.trailingStore(t, trailing).PutPartsIfVersion(t.Context(), "k", split, "")
					require.NoError(t, err)

					seen := f.requests()
					require.Len(t, seen, 1)
					req := seen[0]
					assert.Equal(t, http.MethodPut, req.method)
					assert.Equal(t, int64(n), req.length, "the request's Content-Length is the record's size")
					assert.Equal(t, strconv.Itoa(n), req.header.Get("Content-Length"))
					assert.Equal(t, int64(n), req.body, "the record's bytes alone, unframed")
					assert.NotContains(t, req.header.Get("Content-Encoding"), "aws-chunked")
					assert.Empty(t, req.header.Get("X-Amz-Decoded-Content-Length"), "not aws-chunked")
					assert.Empty(t, req.header.Get("X-Amz-Trailer"), "no trailer")
					sha := sha256.Sum256(data)
					assert.Equal(t, hex.EncodeToString(sha[:]), req.header.Get("X-Amz-Content-Sha256"), "the record's hash is signed, not STREAMING-")
					assert.Contains(t, req.header.Get("Authorization"), "x-amz-content-sha256", "and covered by the signature")
					sum := md5.Sum(data)
					assert.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), req.header.Get("Content-Md5"))
				})
			}
		}
	}
}

// TestMinioStorePutIsSentOnce: minio-go retries a 503 or a 500 when it can
// rewind the body. A retried conditional PUT whose first attempt landed
// would come back 412 and be misreported as a conflict, so the adapter
// sends it once even on a client configured to retry.
func TestMinioStorePutIsSentOnce(t *testing.T) {
	for _, code := range []string{"SlowDown", "InternalError"} {
		t.Run(code, func(t *testing.T) {
			status := http.StatusServiceUnavailable
			if code == "InternalError" {
				status = http.StatusInternalServerError
			}
			f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) { writeS3Error(w, status, code) })
			_, err := f.store(t, 3).PutIfVersion(t.Context(), "k", []byte("record"), "etag-1")
			assertNeitherSentinel(t, err)
			assert.Equal(t, 1, len(f.requests()), "PUT requests the server received")
		})
	}
}

func TestMinioStoreErrorMapping(t *testing.T) {
	tests := []struct {
		op     string // "get", "create" (put with ""), "update" (put with a token), "delete"
		status int
		code   string
		want   error // ErrConflict, ErrNotFound, fs.ErrPermission, or nil for none
	}{
		{"create", http.StatusPreconditionFailed, "PreconditionFailed", ErrConflict},
		{"update", http.StatusPreconditionFailed, "PreconditionFailed", ErrConflict},
		{"update", http.StatusConflict, "ConditionalRequestConflict", ErrConflict},
		{"create", http.StatusConflict, "ConditionalRequestConflict", ErrConflict},
		{"update", http.StatusNotFound, "NoSuchKey", ErrConflict},
		{"create", http.StatusNotFound, "NoSuchBucket", nil},
		{"update", http.StatusNotFound, "NoSuchBucket", nil},
		{"update", http.StatusConflict, "OperationAborted", nil},
		{"update", http.StatusInternalServerError, "InternalError", nil},
		{"update", http.StatusNotImplemented, "NotImplemented", nil},
		{"get", http.StatusNotFound, "NoSuchKey", ErrNotFound},
		{"get", http.StatusNotFound, "NoSuchBucket", nil},
		{"get", http.StatusInternalServerError, "InternalError", nil},
		{"get", http.StatusPreconditionFailed, "PreconditionFailed", nil},
		{"delete", http.StatusInternalServerError, "InternalError", nil},
		// Refused credentials or rights, on every operation.
		{"create", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"update", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"get", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"delete", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"get", http.StatusForbidden, "InvalidAccessKeyId", fs.ErrPermission},
		{"update", http.StatusForbidden, "InvalidAccessKeyId", fs.ErrPermission},
		{"get", http.StatusForbidden, "SignatureDoesNotMatch", fs.ErrPermission},
		{"create", http.StatusForbidden, "SignatureDoesNotMatch", fs.ErrPermission},
		{"get", http.StatusUnauthorized, "Unauthorized", fs.ErrPermission},
		{"update", http.StatusUnauthorized, "Unauthorized", fs.ErrPermission},
		// A 403 that is about the request, not its credentials.
		{"get", http.StatusForbidden, "RequestTimeTooSkewed", nil},
		{"update", http.StatusForbidden, "RequestTimeTooSkewed", nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d %s", tt.op, tt.status, tt.code), func(t *testing.T) {
			f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) { writeS3Error(w, tt.status, tt.code) })
			s := f.store(t, 1)
			var err error
			switch tt.op {
			case "get":
				_, _, err = s.Get(t.Context(), "k")
			case "create":
				_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "")
			case "update":
				_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "etag-1")
			case "delete":
				err = s.Delete(t.Context(), "k")
			}
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "writefence: s3 "), "error %q lacks the adapter's prefix", err)
			assert.NotContains(t, err.Error(), s3FakeSecret)
			for _, sentinel := range []error{ErrConflict, ErrNotFound, fs.ErrPermission} {
				assert.Equal(t, sentinel == tt.want, errors.Is(err, sentinel), "errors.Is(%v, %v)", err, sentinel)
			}
			// Both our error, with its context, and the SDK's are
			// reachable.
			var se *StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "k", se.Key)
			assert.Equal(t, map[string]string{"get": "s3 get", "create": "s3 put", "update": "s3 put", "delete": "s3 delete"}[tt.op], se.Op)
			var resp minio.ErrorResponse
			require.ErrorAs(t, err, &resp, "the SDK's error must stay reachable")
			assert.Equal(t, tt.code, resp.Code)
			assert.Equal(t, tt.status, resp.StatusCode)
		})
	}
}

func TestMinioStoreDeleteMissingKey(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) { writeS3Error(w, http.StatusNotFound, "NoSuchKey") })
	require.NoError(t, f.store(t, 1).Delete(t.Context(), "k"))
	require.Len(t, f.requests(), 1)
	assert.Equal(t, http.MethodDelete, f.requests()[0].method)
}

// TestMinioStoreTransportError points the adapter at a port nothing listens
// on: a failure to reach the server is neither a conflict nor a missing key.
func TestMinioStoreTransportError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	s := newMinioStore(s3FakeClient(t, addr, 1, false), "bucket", nil)
	_, _, err = s.Get(t.Context(), "k")
	assertNeitherSentinel(t, err)
	_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "")
	assertNeitherSentinel(t, err)
	_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "etag-1")
	assertNeitherSentinel(t, err)
	assertNeitherSentinel(t, s.Delete(t.Context(), "k"))
}

func TestMinioStoreGetReturnsBodyAndETag(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		writeS3Object(w, "record bytes", `"3c5f8c6a"`)
	})
	data, v, err := f.store(t, 1).Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "record bytes", string(data))
	assert.Equal(t, "3c5f8c6a", v)
	seen := f.requests()
	require.Len(t, seen, 1, "body and ETag come from one response")
	assert.Equal(t, http.MethodGet, seen[0].method)
}

// TestMinioStoreMissingETag: an empty token would mean "create-only" to the
// next write, so a response without an ETag is an error, not a version.
func TestMinioStoreMissingETag(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			writeS3Object(w, "record bytes", "")
		}
	})
	s := f.store(t, 1)
	_, _, err := s.Get(t.Context(), "k")
	assertNeitherSentinel(t, err)
	_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "")
	assertNeitherSentinel(t, err)
}

// TestMinioStoreRejectsTokenThatIsNoETag: "*" or a quote and a comma would
// widen If-Match to "any version" or a list; such a token equals no ETag,
// so it is a conflict, decided without a request.
func TestMinioStoreRejectsTokenThatIsNoETag(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("ETag", `"x"`) })
	s := f.store(t, 1)
	for _, token := range []string{"*", `a", "b`, "a b", "a\r\nX-Evil: 1"} {
		_, err := s.PutIfVersion(t.Context(), "k", []byte("x"), token)
		require.ErrorIs(t, err, ErrConflict, "token %q", token)
		assert.NotErrorIs(t, err, ErrNotFound)
	}
	assert.Empty(t, f.requests())
}

// TestMinioStoreCancelledContext: cancellation comes back as ctx.Err()
// itself, never as a conflict or a missing key.
func TestMinioStoreCancelledContext(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		writeS3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
	})
	s := f.store(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := s.Get(ctx, "k")
	assert.Equal(t, context.Canceled, err)
	_, err = s.PutIfVersion(ctx, "k", []byte("x"), "etag-1")
	assert.Equal(t, context.Canceled, err)
	assert.Equal(t, context.Canceled, s.Delete(ctx, "k"))
}

// fakeS3API serves Get from a body the test controls and counts the bytes
// the adapter pulls from it.
type fakeS3API struct {
	size   int64 // the object's length; the ObjectInfo.Size (Content-Length) unless unknown
	known  bool  // whether the response declares size
	failAt int64 // when positive, the body fails after this many bytes
	pulled atomic.Int64
}

var errInjected = errors.New("connection reset by the test")

func (f *fakeS3API) GetObject(ctx context.Context, bucket, key string, opts minio.GetObjectOptions) (io.ReadCloser, minio.ObjectInfo, http.Header, error) {
	info := minio.ObjectInfo{Key: key, ETag: "e1", Size: -1}
	if f.known {
		info.Size = f.size
	}
	return io.NopCloser(&countingBody{f: f, left: f.size}), info, http.Header{}, nil
}

func (f *fakeS3API) PutObject(context.Context, string, string, io.Reader, int64, string, string, minio.PutObjectOptions) (minio.UploadInfo, error) {
	return minio.UploadInfo{}, errors.New("not used")
}

func (f *fakeS3API) RemoveObject(context.Context, string, string, minio.RemoveObjectOptions) error {
	return errors.New("not used")
}

type countingBody struct {
	f    *fakeS3API
	left int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > b.left {
		n = b.left
	}
	if fa := b.f.failAt; fa > 0 {
		done := b.f.pulled.Load()
		if done >= fa {
			return 0, errInjected
		}
		n = min(n, fa-done)
	}
	clear(p[:n])
	b.left -= n
	b.f.pulled.Add(n)
	return int(n), nil
}

// TestMinioStoreGetLimit checks the read limit at its boundary and that the
// adapter never pulls more than limit+1 bytes, whatever the object's size
// and whether or not the response declares it.
func TestMinioStoreGetLimit(t *testing.T) {
	const limit = 1000
	const huge = 1 << 40 // never materialised: the body is generated on demand
	tests := []struct {
		name      string
		size      int64
		known     bool
		tooLarge  bool
		maxPulled int64
	}{
		{"at limit, declared", limit, true, false, limit},
		{"at limit, undeclared", limit, false, false, limit},
		{"one over, declared", limit + 1, true, true, 0},
		{"one over, undeclared", limit + 1, false, true, limit + 1},
		{"huge, declared", huge, true, true, 0},
		{"huge, undeclared", huge, false, true, limit + 1},
		{"empty", 0, true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := &fakeS3API{size: tt.size, known: tt.known}
			s := &minioStore{MaxObjectSize: limit, api: api, bucket: "bucket"}
			data, v, err := s.Get(t.Context(), "k")
			assert.LessOrEqual(t, api.pulled.Load(), tt.maxPulled)
			if !tt.tooLarge {
				require.NoError(t, err)
				assert.Len(t, data, int(tt.size))
				assert.Equal(t, "e1", v)
				return
			}
			assertTooLarge(t, err, "k", limit)
		})
	}
}

func TestMinioStoreGetDefaultLimit(t *testing.T) {
	api := &fakeS3API{size: defaultMaxObjectSize + 1, known: true}
	s := &minioStore{api: api, bucket: "bucket"}
	_, _, err := s.Get(t.Context(), "k")
	assertTooLarge(t, err, "k", defaultMaxObjectSize)
	assert.Zero(t, api.pulled.Load())
}

// assertTooLarge checks that err is the refusal of an S3 read of key over
// limit bytes.
func assertTooLarge(t *testing.T, err error, key string, limit int64) {
	t.Helper()
	require.ErrorIs(t, err, ErrTooLarge)
	var se *StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "s3 get", se.Op)
	assert.Equal(t, key, se.Key)
	assert.Equal(t, fmt.Sprintf("writefence: s3 get %s: object too large: more than %d bytes", key, limit), err.Error())
}

// TestMinioStoreGetBodyFailure: a response cut mid-body is an ordinary
// failure that keeps its cause.
func TestMinioStoreGetBodyFailure(t *testing.T) {
	api := &fakeS3API{size: 500, known: true, failAt: 100}
	s := &minioStore{api: api, bucket: "bucket"}
	_, _, err := s.Get(t.Context(), "k")
	require.ErrorIs(t, err, errInjected)
	assert.NotErrorIs(t, err, ErrNotFound)
	assert.NotErrorIs(t, err, ErrConflict)
	assert.Equal(t, "writefence: s3 get k: connection reset by the test", err.Error())
}

// TestMinioStoreGetTooLargeOverHTTP serves a body 1000 times the limit and
// counts what the server managed to write before the adapter hung up: the
// limit plus what loopback socket buffers hold, far from the whole body.
func TestMinioStoreGetTooLargeOverHTTP(t *testing.T) {
	const limit = 1 << 20
	const served = 1000 * limit
	for _, declare := range []bool{true, false} {
		t.Run("content-length "+strconv.FormatBool(declare), func(t *testing.T) {
			var written atomic.Int64
			done := make(chan struct{})
			f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
				defer close(done)
				w.Header().Set("ETag", `"e1"`)
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
				if declare {
					w.Header().Set("Content-Length", strconv.Itoa(served))
				}
				chunk := make([]byte, 32<<10)
				for written.Load() < served {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
			s := f.store(t, 1)
			s.MaxObjectSize = limit

			_, _, err := s.Get(t.Context(), "k")
			assertTooLarge(t, err, "k", limit)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the server is still writing: the adapter did not hang up")
			}
			t.Logf("server wrote %d of %d bytes for a limit of %d", written.Load(), served, limit)
			assert.Less(t, written.Load(), int64(64<<20))
		})
	}
}

// TestMinioGetPrefixWire checks the request GetPrefix sends and how it reads
// the answers of servers that differ from MinIO.
func TestMinioGetPrefixWire(t *testing.T) {
	const body = "0123456789"
	// partial answers a range request as S3 does, with the given
	// Content-Range, ETag and body.
	partial := func(w http.ResponseWriter, contentRange, etag, part string) {
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Content-Range", contentRange)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Length", strconv.Itoa(len(part)))
		w.WriteHeader(http.StatusPartialContent)
		io.WriteString(w, part)
	}
	cases := []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		prefix string
		size   int64
		fails  bool
	}{
		{"range honoured", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-3/10", `"e1"`, body[:4])
		}, "0123", 10, false},
		{"range ignored", func(w http.ResponseWriter, r *http.Request) {
			writeS3Object(w, body, `"e1"`)
		}, "0123", 10, false},
		{"total unknown", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-3/*", `"e1"`, body[:4])
		}, "", 0, true},
		{"short body", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-1/10", `"e1"`, body[:2])
		}, "", 0, true},
		{"no etag", func(w http.ResponseWriter, r *http.Request) {
			partial(w, "bytes 0-3/10", "", body[:4])
		}, "", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := newS3Fake(t, tc.answer)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			prefix, size, version, err := fake.store(t, 1).GetPrefix(ctx, "k", 4)
			reqs := fake.requests()
			require.Len(t, reqs, 1)
			assert.Equal(t, "bytes=0-3", reqs[0].header.Get("Range"))
			if tc.fails {
				assertNeitherSentinel(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.prefix, string(prefix))
			assert.Equal(t, tc.size, size)
			assert.Equal(t, "e1", version)
		})
	}

	// A 416 (the empty object) is followed by one unranged GET, whose
	// answer is read from that response alone.
	fake := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			writeS3Error(w, http.StatusRequestedRangeNotSatisfiable, "InvalidRange")
			return
		}
		writeS3Object(w, "", `"empty"`)
	})
	prefix, size, version, err := fake.store(t, 1).GetPrefix(t.Context(), "k", 4)
	require.NoError(t, err)
	assert.Empty(t, prefix)
	assert.Zero(t, size)
	assert.Equal(t, "empty", version)
	reqs := fake.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "", reqs[1].header.Get("Range"))
}

// refusingS3API answers every request with one S3 error response and
// counts the requests.
type refusingS3API struct {
	resp minio.ErrorResponse
	gets atomic.Int64
	puts atomic.Int64
}

func (f *refusingS3API) GetObject(context.Context, string, string, minio.GetObjectOptions) (io.ReadCloser, minio.ObjectInfo, http.Header, error) {
	f.gets.Add(1)
	return nil, minio.ObjectInfo{}, nil, f.resp
}

func (f *refusingS3API) PutObject(_ context.Context, _, _ string, body io.Reader, _ int64, _, _ string, _ minio.PutObjectOptions) (minio.UploadInfo, error) {
	f.puts.Add(1)
	_, _ = io.Copy(io.Discard, body)
	return minio.UploadInfo{}, f.resp
}

func (f *refusingS3API) RemoveObject(context.Context, string, string, minio.RemoveObjectOptions) error {
	return errors.New("not used")
}

// TestMinioFencePermissionIsFinal: a Push whose read or write is refused
// for its credentials returns, after that one request, an error matching
// fs.ErrPermission that still reaches the server's answer. A refused write
// wrote nothing, so its outcome is not unknown, and nothing retries it.
func TestMinioFencePermissionIsFinal(t *testing.T) {
	for _, resp := range []minio.ErrorResponse{
		{StatusCode: http.StatusForbidden, Code: "AccessDenied"},
		{StatusCode: http.StatusForbidden, Code: "InvalidAccessKeyId"},
		{StatusCode: http.StatusForbidden, Code: "SignatureDoesNotMatch"},
		{StatusCode: http.StatusUnauthorized, Code: "Unauthorized"},
	} {
		for _, cached := range []bool{false, true} {
			name := fmt.Sprintf("%d %s, %s", resp.StatusCode, resp.Code, map[bool]string{false: "read", true: "write on a remembered version"}[cached])
			t.Run(name, func(t *testing.T) {
				api := &refusingS3API{resp: resp}
				f := &Fence{Store: &minioStore{api: api, bucket: "bucket"}, RetryDelay: time.Microsecond}
				if cached {
					key, err := shardKey("", "wal", "0")
					require.NoError(t, err)
					f.cache.remember(key, cachedRecord{version: "d41d8cd98f00b204e9800998ecf8427e", prior: prior{epoch: 1, writer: "w"}})
				}
				err := f.Push(t.Context(), "wal", "0", "w", 2, []byte("payload"))
				require.ErrorIs(t, err, fs.ErrPermission)
				assert.NotErrorIs(t, err, ErrOutcomeUnknown, "a refused write wrote nothing")
				var got minio.ErrorResponse
				require.ErrorAs(t, err, &got, "the server's answer stays reachable")
				assert.Equal(t, resp.Code, got.Code)
				want := [2]int64{1, 0}
				if cached {
					want = [2]int64{0, 1}
				}
				assert.Equal(t, want, [2]int64{api.gets.Load(), api.puts.Load()}, "one request, never retried: %v", err)
			})
		}
	}
}

// s3MultipartFake answers a PUT and a multipart upload as S3 does, and a
// HEAD of the object it created with the fake server's own clock,
// lastMod.
func s3MultipartFake(lastMod time.Time, size int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			io.WriteString(w, `<InitiateMultipartUploadResult><Bucket>bucket</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>`)
		case r.Method == http.MethodPut && q.Has("partNumber"):
			w.Header().Set("ETag", `"part`+q.Get("partNumber")+`"`)
		case r.Method == http.MethodPut && r.URL.RawQuery == "":
			w.Header().Set("ETag", `"single"`)
		case r.Method == http.MethodPost && q.Has("uploadId"):
			io.WriteString(w, `<CompleteMultipartUploadResult><Bucket>bucket</Bucket><Key>k</Key><ETag>"whole-3"</ETag></CompleteMultipartUploadResult>`)
		case r.Method == http.MethodHead:
			w.Header().Set("ETag", `"whole-3"`)
			w.Header().Set("Last-Modified", lastMod.Format(http.TimeFormat))
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		default:
			writeS3Error(w, http.StatusNotImplemented, "NotImplemented")
		}
	}
}

// s3DecodedLength returns the length of a request's payload, without the
// aws-chunked framing minio-go adds over plain HTTP.
func s3DecodedLength(s s3Seen) string {
	if n := s.header.Get("X-Amz-Decoded-Content-Length"); n != "" {
		return n
	}
	return s.header.Get("Content-Length")
}

// TestMinioBlobRequests: CreateBlob is one multipart upload in parts of
// BlobPartSize, started with If-None-Match: * (minio-go sends it there, and
// not on the completing request), each part sent whole as UNSIGNED-PAYLOAD
// (not in signed aws-chunked chunks), then one HEAD conditioned on the
// upload's ETag; the blob's time is the server's Last-Modified, not the
// client's clock.
func TestMinioBlobRequests(t *testing.T) {
	const part, size = 5 << 20, 12<<20 + 3
	serverTime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC) // the server's clock, far from ours
	f := newS3Fake(t, s3MultipartFake(serverTime, size))
	s := f.store(t, 1)
	s.BlobPartSize = part
	info, err := s.CreateBlob(t.Context(), "k", io.LimitReader(zeros{}, size))
	require.NoError(t, err)
	assert.Equal(t, BlobInfo{Key: "k", Size: size, Modified: serverTime}, info)

	seen := f.requests()
	require.Len(t, seen, 6, "initiate, three parts, complete, head")
	assert.Equal(t, http.MethodPost, seen[0].method)
	assert.Equal(t, "uploads=", seen[0].query)
	assert.Equal(t, "*", seen[0].header.Get("If-None-Match"))
	assert.Equal(t, "application/octet-stream", seen[0].header.Get("Content-Type"))
	for i, want := range []int{part, part, size - 2*part} {
		p := seen[1+i]
		assert.Equal(t, http.MethodPut, p.method)
		assert.Contains(t, p.query, fmt.Sprintf("partNumber=%d", i+1))
		assert.Equal(t, strconv.Itoa(want), s3DecodedLength(p), "part %d", i+1)
		assert.Equal(t, "UNSIGNED-PAYLOAD", p.header.Get("X-Amz-Content-Sha256"), "part %d", i+1)
		assert.Empty(t, p.header.Get("X-Amz-Decoded-Content-Length"), "part %d: not aws-chunked", i+1)
		assert.Equal(t, int64(want), p.body, "part %d: the part's bytes alone", i+1)
	}
	assert.Equal(t, http.MethodPost, seen[4].method)
	assert.Equal(t, "uploadId=u1", seen[4].query)
	assert.Empty(t, seen[4].header.Get("If-None-Match"), "minio-go does not send the precondition on the completing request")
	assert.Equal(t, http.MethodHead, seen[5].method)
	assert.Equal(t, `"whole-3"`, seen[5].header.Get("If-Match"), "the info read is the upload's own")
}

// TestMinioBlobSmallIsOnePut: a blob under 5 MiB, an empty one included,
// is one PUT of its exact length, its SHA-256 signed under 1 MiB and
// UNSIGNED-PAYLOAD from 1 MiB on (never aws-chunked), carrying
// If-None-Match: *, then the HEAD; from 5 MiB on it is a multipart upload.
// The PUT is sent once, even by a client configured to retry. The store
// here knows its server to ignore x-amz-checksum-crc32c, so the PUT
// carries its MD5 (the test of a store's first blob, and the CRC-32C, are
// TestMinioBlobCRC32CTest's).
func TestMinioBlobSmallIsOnePut(t *testing.T) {
	serverTime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, n := range []int64{0, 100, 1<<20 - 1, 1 << 20, 5<<20 - 1} {
		t.Run(strconv.FormatInt(n, 10), func(t *testing.T) {
			f := newS3Fake(t, s3MultipartFake(serverTime, n))
			s := f.store(t, 1)
			s.crc.Store(s3CRCIgnored)
			info, err := s.CreateBlob(t.Context(), "k", io.LimitReader(zeros{}, n))
			require.NoError(t, err)
			assert.Equal(t, BlobInfo{Key: "k", Size: n, Modified: serverTime}, info)
			seen := f.requests()
			require.Len(t, seen, 2)
			assert.Equal(t, http.MethodPut, seen[0].method)
			assert.Empty(t, seen[0].query, "no ?uploads, ?partNumber or ?uploadId")
			assert.Equal(t, "*", seen[0].header.Get("If-None-Match"))
			if sum := sha256.Sum256(make([]byte, n)); n < 1<<20 {
				assert.Equal(t, hex.EncodeToString(sum[:]), seen[0].header.Get("X-Amz-Content-Sha256"), "the payload's hash is signed")
			} else {
				assert.Equal(t, "UNSIGNED-PAYLOAD", seen[0].header.Get("X-Amz-Content-Sha256"))
			}
			md := md5.Sum(make([]byte, n))
			assert.Equal(t, base64.StdEncoding.EncodeToString(md[:]), seen[0].header.Get("Content-Md5"), "the payload's MD5")
			assert.Empty(t, seen[0].header.Get("X-Amz-Decoded-Content-Length"), "not aws-chunked")
			assert.Equal(t, strconv.FormatInt(n, 10), seen[0].header.Get("Content-Length"))
			assert.Equal(t, n, seen[0].body)
			assert.Equal(t, http.MethodHead, seen[1].method)
			assert.Equal(t, `"single"`, seen[1].header.Get("If-Match"))
		})
	}
	for _, n := range []int64{5, 2 << 20} {
		t.Run("trailing headers "+strconv.FormatInt(n, 10), func(t *testing.T) {
			// A client that adds checksum trailers sends a blob under 5 MiB
			// the same way: one PUT of its exact length, not aws-chunked,
			// signed or not.
			f := newS3Fake(t, s3MultipartFake(serverTime, n))
			_, err := f.trailingStore(t, true).CreateBlob(t.Context(), "k", io.LimitReader(zeros{}, n))
			require.NoError(t, err)
			seen := f.requests()
			require.Len(t, seen, 2)
			assert.Equal(t, n, seen[0].length)
			assert.Empty(t, seen[0].header.Get("X-Amz-Decoded-Content-Length"), "not aws-chunked")
			assert.Empty(t, seen[0].header.Get("X-Amz-Trailer"), "no trailer")
		})
	}
	t.Run("5MiB", func(t *testing.T) {
		f := newS3Fake(t, s3MultipartFake(serverTime, 5<<20))
		_, err := f.store(t, 1).CreateBlob(t.Context(), "k", io.LimitReader(zeros{}, 5<<20))
		require.NoError(t, err)
		seen := f.requests()
		require.Len(t, seen, 4, "initiate, one part, complete, head")
		assert.Equal(t, "uploads=", seen[0].query)
	})
	t.Run("sent once", func(t *testing.T) {
		f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
			writeS3Error(w, http.StatusServiceUnavailable, "SlowDown")
		})
		_, err := f.store(t, 3).CreateBlob(t.Context(), "k", strings.NewReader("small"))
		assertNeitherSentinel(t, err)
		assert.Len(t, f.requests(), 1)
	})
}

// TestMinioWriteBlobRequests: WriteBlob, which PutBlob writes through,
// sends a blob under 5 MiB as one PUT and nothing else (the server
// checked its length and MD5, so the size it holds is the size sent); a
// larger blob is CreateBlob's multipart upload and the HEAD that reads
// the size the server put together.
func TestMinioWriteBlobRequests(t *testing.T) {
	serverTime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, c := range []struct {
		n    int64
		reqs []string
	}{
		{0, []string{http.MethodPut}},
		{64 << 10, []string{http.MethodPut}},
		{5<<20 - 1, []string{http.MethodPut}},
		{5 << 20, []string{http.MethodPost, http.MethodPut, http.MethodPost, http.MethodHead}},
	} {
		t.Run(strconv.FormatInt(c.n, 10), func(t *testing.T) {
			f := newS3Fake(t, s3MultipartFake(serverTime, c.n))
			size, err := f.store(t, 1).WriteBlob(t.Context(), "k", io.LimitReader(zeros{}, c.n))
			require.NoError(t, err)
			assert.Equal(t, c.n, size)
			var methods []string
			for _, r := range f.requests() {
				methods = append(methods, r.method)
			}
			assert.Equal(t, c.reqs, methods)
		})
	}
}

// zeros yields zero bytes for ever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestMinioBlobPartSize: a BlobPartSize outside S3's limits for a part is
// refused before any request.
func TestMinioBlobPartSize(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {})
	s := f.store(t, 1)
	for _, size := range []int64{-1, 1 << 20, 5<<20 - 1, 5<<30 + 1} {
		s.BlobPartSize = size
		_, err := s.CreateBlob(t.Context(), "k", strings.NewReader("x"))
		require.ErrorIs(t, err, ErrInvalidArgument, "part size %d", size)
		var se *StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "s3 blob create", se.Op)
	}
	assert.Empty(t, f.requests())
}

// TestMinioBlobErrorMapping: the blob calls classify the server's answers
// as the record calls do, and keep the SDK's error reachable.
func TestMinioBlobErrorMapping(t *testing.T) {
	tests := []struct {
		op     string // "create" (one PUT), "create large" (multipart), "open", "stat", "delete", "list"
		status int
		code   string
		want   error
	}{
		{"create", http.StatusPreconditionFailed, "PreconditionFailed", ErrConflict},
		{"create large", http.StatusPreconditionFailed, "PreconditionFailed", ErrConflict},
		{"create large", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"create large", http.StatusInternalServerError, "InternalError", nil},
		{"create", http.StatusConflict, "ConditionalRequestConflict", ErrConflict},
		{"create", http.StatusNotFound, "NoSuchBucket", nil},
		{"create", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"create", http.StatusInternalServerError, "InternalError", nil},
		{"open", http.StatusNotFound, "NoSuchKey", ErrNotFound},
		{"open", http.StatusNotFound, "NoSuchBucket", nil},
		{"open", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"open", http.StatusPreconditionFailed, "PreconditionFailed", nil},
		{"stat", http.StatusNotFound, "NoSuchKey", ErrNotFound},
		{"stat", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"stat", http.StatusInternalServerError, "InternalError", nil},
		{"delete", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"delete", http.StatusInternalServerError, "InternalError", nil},
		{"list", http.StatusForbidden, "AccessDenied", fs.ErrPermission},
		{"list", http.StatusNotFound, "NoSuchBucket", nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d %s", tt.op, tt.status, tt.code), func(t *testing.T) {
			f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) { writeS3Error(w, tt.status, tt.code) })
			s := f.store(t, 1)
			var err error
			key := "k"
			switch tt.op {
			case "create":
				_, err = s.CreateBlob(t.Context(), key, strings.NewReader("x"))
			case "create large":
				_, err = s.CreateBlob(t.Context(), key, io.LimitReader(zeros{}, 1<<20))
			case "open":
				_, _, err = s.OpenBlob(t.Context(), key)
			case "stat":
				_, err = s.StatBlob(t.Context(), key)
			case "delete":
				err = s.DeleteBlob(t.Context(), key)
			case "list":
				key = "p/"
				err = s.ListBlobs(t.Context(), key, func(BlobInfo) error { return nil })
			}
			require.Error(t, err)
			assert.NotContains(t, err.Error(), s3FakeSecret)
			for _, sentinel := range []error{ErrConflict, ErrNotFound, fs.ErrPermission} {
				assert.Equal(t, sentinel == tt.want, errors.Is(err, sentinel), "errors.Is(%v, %v)", err, sentinel)
			}
			var se *StoreError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, key, se.Key)
			assert.Equal(t, "s3 blob "+strings.Fields(tt.op)[0], se.Op)
			var resp minio.ErrorResponse
			require.ErrorAs(t, err, &resp, "the SDK's error must stay reachable")
			assert.Equal(t, tt.status, resp.StatusCode)
		})
	}
}

// TestMinioBlobReadFailure: a blob's body cut short by the connection is a
// *StoreError of "s3 blob read", neither a clean end nor a sentinel.
func TestMinioBlobReadFailure(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "only ten b")
	})
	rc, info, err := f.store(t, 1).OpenBlob(t.Context(), "k")
	require.NoError(t, err)
	defer rc.Close()
	assert.Equal(t, int64(100), info.Size)
	_, err = io.ReadAll(rc)
	var se *StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "s3 blob read", se.Op)
	assert.Equal(t, "k", se.Key)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.NotErrorIs(t, err, ErrNotFound)
}

// TestMinioBlobCancelledContext: cancellation comes back as ctx.Err()
// itself from every blob call.
func TestMinioBlobCancelledContext(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		writeS3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
	})
	s := f.store(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.CreateBlob(ctx, "k", strings.NewReader("x"))
	assert.Equal(t, context.Canceled, err)
	_, _, err = s.OpenBlob(ctx, "k")
	assert.Equal(t, context.Canceled, err)
	_, err = s.StatBlob(ctx, "k")
	assert.Equal(t, context.Canceled, err)
	assert.Equal(t, context.Canceled, s.DeleteBlob(ctx, "k"))
	assert.Equal(t, context.Canceled, s.ListBlobs(ctx, "", func(BlobInfo) error { return nil }))
}

// s3CRC32COf returns data's CRC-32C as x-amz-checksum-crc32c carries it.
func s3CRC32COf(data []byte) string {
	sum := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))
}

// s3CRCFake answers a PUT that carries x-amz-checksum-crc32c as a server
// of the kind named does, and everything else with s3MultipartFake:
// "checks" refuses a CRC-32C that does not match the body with code,
// "refuses" refuses the header whatever its value, with code (and 400;
// "refuses 501", with 501), and "ignores" does not look at it.
func s3CRCFake(f **s3Fake, kind, code string) http.HandlerFunc {
	next := s3MultipartFake(time.Now(), 0)
	return func(w http.ResponseWriter, r *http.Request) {
		sent := r.Header.Get(s3CRCHeader)
		if r.Method == http.MethodPut && sent != "" {
			seen := (*f).requests()
			switch got := seen[len(seen)-1].crc; {
			case kind == "checks" && sent != got, kind == "refuses":
				writeS3Error(w, http.StatusBadRequest, code)
				return
			case kind == "refuses 501":
				writeS3Error(w, http.StatusNotImplemented, code)
				return
			}
		}
		next(w, r)
	}
}

// TestMinioBlobCRC32CTest: the first non-empty one-PUT blob of a store
// carries a CRC-32C that does not match it, no MD5, and its SHA-256
// signed whatever its size. A server that
// refuses it for that (MinIO's code or AWS's) gets it again with its
// CRC-32C alone, and every later blob the same way: one PUT of its exact
// length, not aws-chunked, with no trailer, its SHA-256 signed under 1
// MiB. A server that stores it, or refuses the header itself, gets an
// MD5 with every blob from then on. Records carry their MD5 whatever the
// store knows. The PUTs are checked as they were received; the fake
// server answers each as the server of that kind would. The sizes bound
// the two classes of a one-PUT blob (signed under 1 MiB, unsigned from
// there): the store's test and CRC-32C take no other turn by size, and
// the largest one-PUT blob, 5 MiB less a byte, is
// TestMinioBlobSmallIsOnePut's. The test is parallel: its server is its
// own, and it measures neither the heap nor the time.
func TestMinioBlobCRC32CTest(t *testing.T) {
	t.Parallel()
	type put struct {
		md5 bool   // carries Content-MD5
		crc string // "": no x-amz-checksum-crc32c; "right", "wrong"
	}
	test, crcOnly, md5Only := put{false, "wrong"}, put{false, "right"}, put{true, ""}
	for _, c := range []struct {
		kind, code    string
		first, second []put // the PUTs of the first blob, and of the second
	}{
		{"checks", "XAmzContentChecksumMismatch", []put{test, crcOnly}, []put{crcOnly}},
		{"checks", "BadDigest", []put{test, crcOnly}, []put{crcOnly}},
		{"ignores", "", []put{test}, []put{md5Only}},
		{"refuses", "InvalidArgument", []put{test, md5Only}, []put{md5Only}},
		{"refuses", "NotImplemented", []put{test, md5Only}, []put{md5Only}},
		{"refuses", "UnknownHeader", []put{test, md5Only}, []put{md5Only}},
		{"refuses 501", "UnsupportedHeader", []put{test, md5Only}, []put{md5Only}},
	} {
		for _, n := range []int64{100, 1<<20 - 1, 1 << 20} {
			for _, trailing := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s/%d/trailing=%t", c.kind, c.code, n, trailing), func(t *testing.T) {
					var f *s3Fake
					f = newS3Fake(t, s3CRCFake(&f, c.kind, c.code))
					s := f.trailingStore(t, trailing)
					for i, want := range [][]put{c.first, c.second} {
						body := bytes.Repeat([]byte{byte('a' + i)}, int(n))
						size, err := s.WriteBlob(t.Context(), "k", bytes.NewReader(body))
						require.NoError(t, err, "blob %d", i)
						assert.Equal(t, n, size)
						seen := f.requests()
						require.Len(t, seen, len(want), "blob %d: PUTs", i)
						for j, w := range want {
							r := seen[j]
							md := md5.Sum(body)
							switch w.md5 {
							case true:
								assert.Equal(t, base64.StdEncoding.EncodeToString(md[:]), r.header.Get("Content-Md5"), "blob %d, PUT %d: the MD5", i, j)
							default:
								assert.Empty(t, r.header.Get("Content-Md5"), "blob %d, PUT %d: no MD5", i, j)
							}
							switch w.crc {
							case "right":
								assert.Equal(t, r.crc, r.header.Get(s3CRCHeader), "blob %d, PUT %d: the body's CRC-32C", i, j)
							case "wrong":
								assert.NotEmpty(t, r.header.Get(s3CRCHeader), "blob %d, PUT %d: a CRC-32C", i, j)
								assert.NotEqual(t, r.crc, r.header.Get(s3CRCHeader), "blob %d, PUT %d: one that does not match", i, j)
							default:
								assert.Empty(t, r.header.Get(s3CRCHeader), "blob %d, PUT %d: no CRC-32C", i, j)
							}
							assert.Equal(t, http.MethodPut, r.method)
							assert.Equal(t, "*", r.header.Get("If-None-Match"))
							assert.Equal(t, n, r.length, "the exact length")
							assert.Equal(t, n, r.body)
							assert.Empty(t, r.header.Get("X-Amz-Decoded-Content-Length"), "not aws-chunked")
							assert.NotContains(t, r.header.Get("Content-Encoding"), "aws-chunked")
							assert.Empty(t, r.header.Get("X-Amz-Trailer"), "no trailer")
							if sum := sha256.Sum256(body); n < 1<<20 || w == test {
								assert.Equal(t, hex.EncodeToString(sum[:]), r.header.Get("X-Amz-Content-Sha256"), "the payload's hash is signed")
							} else {
								assert.Equal(t, "UNSIGNED-PAYLOAD", r.header.Get("X-Amz-Content-Sha256"))
							}
						}
						f.mu.Lock()
						f.seen = nil
						f.mu.Unlock()
					}

					// A record carries its MD5 and no CRC-32C, whatever the
					// store knows of the server.
					_, err := s.PutIfVersion(t.Context(), "r", []byte("record"), "")
					require.NoError(t, err)
					seen := f.requests()
					require.Len(t, seen, 1)
					md := md5.Sum([]byte("record"))
					assert.Equal(t, base64.StdEncoding.EncodeToString(md[:]), seen[0].header.Get("Content-Md5"))
					assert.Empty(t, seen[0].header.Get(s3CRCHeader))
				})
			}
		}
	}
}

// TestMinioBlobCRC32CUntested: an empty blob, and a test that fails for
// another reason than its CRC-32C (a blob at the key already, the network),
// leave the server untested: the next non-empty blob tests it.
func TestMinioBlobCRC32CUntested(t *testing.T) {
	var f *s3Fake
	var fail atomic.Int32 // status of the next PUT's answer, when not zero
	checks := s3CRCFake(&f, "checks", "XAmzContentChecksumMismatch")
	f = newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		if status := fail.Swap(0); status != 0 {
			writeS3Error(w, int(status), http.StatusText(int(status)))
			return
		}
		checks(w, r)
	})
	s := f.store(t, 1)
	wrote := func(body string) []string {
		t.Helper()
		f.mu.Lock()
		f.seen = nil
		f.mu.Unlock()
		_, err := s.WriteBlob(t.Context(), "k", strings.NewReader(body))
		var sums []string
		for _, r := range f.requests() {
			switch {
			case r.header.Get(s3CRCHeader) == "":
				sums = append(sums, "md5")
			case r.header.Get(s3CRCHeader) != r.crc:
				sums = append(sums, "test")
			default:
				sums = append(sums, "crc")
			}
		}
		if err != nil {
			sums = append(sums, err.Error())
		}
		return sums
	}

	assert.Equal(t, []string{"md5"}, wrote(""), "an empty blob is no test")
	fail.Store(http.StatusPreconditionFailed)
	sums := wrote("taken")
	require.Len(t, sums, 2)
	assert.Equal(t, "test", sums[0], "a blob at the key")
	assert.Equal(t, []string{"test", "crc"}, wrote("next"), "tested again")
	assert.Equal(t, []string{"crc"}, wrote("then"))

	// The network fails the test of a second store.
	s = f.store(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.WriteBlob(ctx, "k", strings.NewReader("cancelled"))
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"test", "crc"}, wrote("next"), "tested again")
}

// TestMinioBlobCRC32CTestRace: while one blob tests the server, the
// blobs written beside it carry their MD5.
func TestMinioBlobCRC32CTestRace(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var f *s3Fake
	checks := s3CRCFake(&f, "checks", "XAmzContentChecksumMismatch")
	f = newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bucket/testing" && r.Header.Get(s3CRCHeader) != "" && r.Header.Get(s3CRCHeader) != s3CRC32COf([]byte("first")) {
			close(arrived)
			<-release
		}
		checks(w, r)
	})
	s := f.store(t, 1)
	done := make(chan error)
	go func() {
		_, err := s.WriteBlob(t.Context(), "testing", strings.NewReader("first"))
		done <- err
	}()
	<-arrived
	_, err := s.WriteBlob(t.Context(), "beside", strings.NewReader("second"))
	require.NoError(t, err)
	close(release)
	require.NoError(t, <-done)
	_, err = s.WriteBlob(t.Context(), "after", strings.NewReader("third"))
	require.NoError(t, err)

	byPath := map[string][]string{}
	for _, r := range f.requests() {
		byPath[r.path] = append(byPath[r.path], r.header.Get("Content-Md5")+"|"+r.header.Get(s3CRCHeader))
	}
	md := func(s string) string { m := md5.Sum([]byte(s)); return base64.StdEncoding.EncodeToString(m[:]) }
	assert.Equal(t, []string{md("second") + "|"}, byPath["/bucket/beside"], "MD5 alone beside the test")
	assert.Len(t, byPath["/bucket/testing"], 2, "the test, then the blob")
	assert.Equal(t, []string{"|" + s3CRC32COf([]byte("third"))}, byPath["/bucket/after"], "CRC-32C alone after it")
}

// TestMinioBlobCRC32CDamagedTest: a server that checks a PUT's MD5 and
// its signed SHA-256, and answers an MD5 mismatch with BadDigest, as AWS
// does, but ignores x-amz-checksum-crc32c (Ceph RGW before Reef, and the
// other S3 servers that predate the checksum headers), is never to store
// a blob whose bytes were damaged on their way. Damaged on its way, the
// store's first blob, the test, must not teach the store that the server
// checks CRC-32Cs: a later damaged blob must be refused, not stored,
// whether the damaged test was the first blob's only PUT or not. The
// blobs are of 1 MiB or more, so a blob that is not a test goes as
// UNSIGNED-PAYLOAD and its digest is the only check made of its bytes.
func TestMinioBlobCRC32CDamagedTest(t *testing.T) {
	for _, damageFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("damaged test=%t", damageFirst), func(t *testing.T) {
			var mu sync.Mutex
			stored := map[string][]byte{}
			damage := map[string]int{"second": 1} // PUTs of each key to damage
			if damageFirst {
				damage["first"] = 1
			}
			f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPut {
					writeS3Error(w, http.StatusNotImplemented, "NotImplemented")
					return
				}
				key := strings.TrimPrefix(r.URL.Path, "/bucket/")
				data, _ := io.ReadAll(r.Body)
				mu.Lock()
				defer mu.Unlock()
				if damage[key] > 0 {
					damage[key]--
					data[len(data)/2] ^= 0x20 // a bit flipped on the way
				}
				if h := r.Header.Get("X-Amz-Content-Sha256"); h != "UNSIGNED-PAYLOAD" {
					if sum := sha256.Sum256(data); h != hex.EncodeToString(sum[:]) {
						writeS3Error(w, http.StatusBadRequest, "XAmzContentSHA256Mismatch")
						return
					}
				}
				if md := r.Header.Get("Content-Md5"); md != "" {
					if sum := md5.Sum(data); md != base64.StdEncoding.EncodeToString(sum[:]) {
						writeS3Error(w, http.StatusBadRequest, "BadDigest")
						return
					}
				}
				if _, ok := stored[key]; ok && r.Header.Get("If-None-Match") == "*" {
					writeS3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
					return
				}
				stored[key] = data
				w.Header().Set("ETag", `"e"`)
			})
			s := f.store(t, 1)

			first := bytes.Repeat([]byte("a"), 1<<20)
			_, err := s.WriteBlob(t.Context(), "first", bytes.NewReader(first))
			mu.Lock()
			got, ok := stored["first"]
			mu.Unlock()
			if damageFirst {
				assert.Error(t, err, "a test damaged on its way is refused")
				assert.False(t, ok, "and nothing is stored")
			} else {
				require.NoError(t, err)
				assert.True(t, bytes.Equal(first, got), "the first blob as stored is the bytes sent")
			}

			second := bytes.Repeat([]byte("b"), 2<<20)
			_, err = s.WriteBlob(t.Context(), "second", bytes.NewReader(second))
			mu.Lock()
			got, ok = stored["second"]
			mu.Unlock()
			assert.False(t, ok && !bytes.Equal(second, got), "a damaged blob was stored, and WriteBlob returned %v", err)
			assert.Error(t, err, "a blob damaged on its way is refused")
			for _, r := range f.requests() {
				t.Logf("%s %s md5=%q crc32c=%q sha256=%.12s", r.method, r.path, r.header.Get("Content-Md5"), r.header.Get(s3CRCHeader), r.header.Get("X-Amz-Content-Sha256"))
			}
		})
	}
}

// TestMinioNoSuchBucket: a missing bucket is no failure a retry mends: a
// push, a blob and a lease's acquisition each end after one request,
// with an error matching errors.ErrUnsupported that names the bucket and
// how to create it.
func TestMinioNoSuchBucket(t *testing.T) {
	f := newS3Fake(t, func(w http.ResponseWriter, r *http.Request) { writeS3Error(w, http.StatusNotFound, "NoSuchBucket") })
	fence := &Fence{Store: f.store(t, 1), RetryDelay: time.Microsecond}
	for name, call := range map[string]func() error{
		"push": func() error { return fence.Push(t.Context(), "wal", "0", "a", 1, []byte("x")) },
		"blob": func() error {
			_, err := fence.PutBlob(t.Context(), "wal", "0", "a", 1, strings.NewReader("segment"))
			return err
		},
		"lease": func() error {
			_, err := (&Lease{Fence: fence, Name: "l", Holder: "h", TTL: time.Minute}).Acquire(t.Context())
			return err
		},
	} {
		before := len(f.requests())
		err := call()
		require.ErrorIs(t, err, errors.ErrUnsupported, name)
		assert.Contains(t, err.Error(), "the bucket bucket does not exist (create it", name)
		assert.Len(t, f.requests()[before:], 1, "%s: one request, no retry", name)
	}
}

// MinioStore is the S3 adapter's own type, for the package's external
// tests, which build a store and then change its settings or call the
// methods its capabilities name.
type MinioStore = minioStore

func NewMinioStore(client *minio.Client, bucket string) *MinioStore {
	return newMinioStore(client, bucket, nil)
}

// failingAfter yields n zero bytes, then fails with err for ever: a
// source cut short, as a gzip.Reader over a truncated stream is
// (io.ErrUnexpectedEOF).
func failingAfter(n int64, err error) io.Reader {
	return io.MultiReader(io.LimitReader(zeros{}, n), errorReader{err})
}

type errorReader struct{ err error }

func (r errorReader) Read([]byte) (int, error) { return 0, r.err }

// TestMinioBlobReaderCutShort: a reader that fails with
// io.ErrUnexpectedEOF fails the S3 store's blob create, with an error
// matching it, past one PUT's size and as a multipart upload, leaving no
// blob (BlobStore's contract); io.ReadFull, the adapter's and minio-go's,
// would take it for the end.
func TestMinioBlobReaderCutShort(t *testing.T) {
	serverTime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, c := range []struct {
		name string
		n    int64 // bytes the reader yields before it fails
	}{
		{"one PUT", 1<<20 + 100},
		{"multipart", 6 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newS3Fake(t, s3MultipartFake(serverTime, c.n))
			s := f.store(t, 1)
			s.BlobPartSize = 5 << 20
			s.crc.Store(s3CRCIgnored)
			_, err := s.WriteBlob(t.Context(), "k", failingAfter(c.n, io.ErrUnexpectedEOF))
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		})
	}
}
