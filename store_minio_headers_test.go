package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

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
	body   int64 // bytes of body received (after any aws-chunked framing)
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
		n, _ := io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		f.seen = append(f.seen, s3Seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), n})
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
func (f *s3Fake) store(t *testing.T, retries int) *writefence.MinioConditionalStore {
	t.Helper()
	return writefence.NewMinioConditionalStore(s3FakeClient(t, f.srv.Listener.Addr().String(), retries), "bucket")
}

func s3FakeClient(t *testing.T, addr string, retries int) *minio.Client {
	t.Helper()
	c, err := minio.New(addr, &minio.Options{
		Creds:      credentials.NewStaticV4(s3FakeAccessKey, s3FakeSecret, ""),
		Region:     "us-east-1", // skips the bucket-location request
		MaxRetries: retries,
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
	assert.NotErrorIs(t, err, writefence.ErrConflict)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
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
		want   error // ErrConflict, ErrNotFound, or nil for neither
	}{
		{"create", http.StatusPreconditionFailed, "PreconditionFailed", writefence.ErrConflict},
		{"update", http.StatusPreconditionFailed, "PreconditionFailed", writefence.ErrConflict},
		{"update", http.StatusConflict, "ConditionalRequestConflict", writefence.ErrConflict},
		{"create", http.StatusConflict, "ConditionalRequestConflict", writefence.ErrConflict},
		{"update", http.StatusNotFound, "NoSuchKey", writefence.ErrConflict},
		{"create", http.StatusNotFound, "NoSuchBucket", nil},
		{"update", http.StatusNotFound, "NoSuchBucket", nil},
		{"update", http.StatusConflict, "OperationAborted", nil},
		{"update", http.StatusInternalServerError, "InternalError", nil},
		{"create", http.StatusForbidden, "AccessDenied", nil},
		{"update", http.StatusNotImplemented, "NotImplemented", nil},
		{"get", http.StatusNotFound, "NoSuchKey", writefence.ErrNotFound},
		{"get", http.StatusNotFound, "NoSuchBucket", nil},
		{"get", http.StatusForbidden, "AccessDenied", nil},
		{"get", http.StatusInternalServerError, "InternalError", nil},
		{"get", http.StatusPreconditionFailed, "PreconditionFailed", nil},
		{"delete", http.StatusInternalServerError, "InternalError", nil},
		{"delete", http.StatusForbidden, "AccessDenied", nil},
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
			for _, sentinel := range []error{writefence.ErrConflict, writefence.ErrNotFound} {
				assert.Equal(t, sentinel == tt.want, errors.Is(err, sentinel), "errors.Is(%v, %v)", err, sentinel)
			}
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

	s := writefence.NewMinioConditionalStore(s3FakeClient(t, addr, 1), "bucket")
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
		require.ErrorIs(t, err, writefence.ErrConflict, "token %q", token)
		assert.NotErrorIs(t, err, writefence.ErrNotFound)
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
