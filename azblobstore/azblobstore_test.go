package azblobstore_test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/azblobstore"
	"github.com/writefence/writefence/internal/testserver/kit"
)

// The unit tests run the store over the real SDK with a fake transport
// underneath, so they see the requests exactly as the SDK sends them.

// sent is a request as the fake service received it.
type sent struct {
	method, path string
	header       http.Header
	body         []byte
}

// header returns the header name of h, however its key is written: the
// SDK sets some headers under keys that are not canonical.
func header(h http.Header, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// fakeService answers every request with answer and records it.
type fakeService struct {
	mu     sync.Mutex
	reqs   []sent
	answer func(r *http.Request, n int) *http.Response // n counts from 1
}

func (f *fakeService) Do(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, sent{r.Method, r.URL.Path, r.Header.Clone(), body})
	n := len(f.reqs)
	f.mu.Unlock()
	resp := f.answer(r, n)
	resp.Request = r
	return resp, nil
}

func (f *fakeService) sent() []sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sent(nil), f.reqs...)
}

// respond builds a response: status, error code (for an error), ETag and
// body.
func respond(status int, code, etag string, body []byte) *http.Response {
	h := http.Header{}
	if code != "" {
		h.Set("x-ms-error-code", code)
	}
	if etag != "" {
		h.Set("ETag", `"`+etag+`"`)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	return &http.Response{
		StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
}

// fakeStore returns a store over a container of the fake service.
func fakeStore(t *testing.T, answer func(r *http.Request, n int) *http.Response) (*azblobstore.Store, *fakeService) {
	t.Helper()
	f := &fakeService{answer: answer}
	c, err := container.NewClientWithNoCredential("http://fake.invalid/account/box", &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: f,
			Retry:     policy.RetryOptions{MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond},
		},
	})
	require.NoError(t, err)
	return azblobstore.New(c), f
}

// TestPreconditionHeaders: a create-only write sends If-None-Match: * and
// no If-Match; an update sends If-Match with the token quoted and no
// If-None-Match; both are one Put Blob of the joined parts with their MD5.
func TestPreconditionHeaders(t *testing.T) {
	store, f := fakeStore(t, func(*http.Request, int) *http.Response {
		return respond(http.StatusCreated, "", "0x8DC0FFEE", nil)
	})
	ctx := t.Context()
	v, err := store.PutIfVersion(ctx, "a/b", []byte("one"), "")
	require.NoError(t, err)
	assert.Equal(t, "0x8DC0FFEE", v, "the token is the ETag without its quotes")
	_, err = writefence.PutParts(ctx, store, "a/b", [][]byte{[]byte("tw"), []byte("o")}, v)
	require.NoError(t, err)

	reqs := f.sent()
	require.Len(t, reqs, 2)
	for i, want := range []struct{ ifNoneMatch, ifMatch, body string }{
		{"*", "", "one"},
		{"", `"0x8DC0FFEE"`, "two"},
	} {
		r := reqs[i]
		assert.Equal(t, http.MethodPut, r.method)
		assert.Equal(t, "/account/box/a/b", r.path)
		assert.Equal(t, "BlockBlob", header(r.header, "x-ms-blob-type"))
		assert.Equal(t, want.ifNoneMatch, header(r.header, "If-None-Match"), "request %d", i)
		assert.Equal(t, want.ifMatch, header(r.header, "If-Match"), "request %d", i)
		assert.Equal(t, want.body, string(r.body))
		sum := md5.Sum([]byte(want.body))
		assert.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), header(r.header, "Content-MD5"))
	}
}

// TestMalformedTokenSendsNothing: a token that cannot be an ETag is a
// conflict, decided without a request: "*" or a quote would otherwise
// widen the precondition.
func TestMalformedTokenSendsNothing(t *testing.T) {
	store, f := fakeStore(t, func(*http.Request, int) *http.Response {
		return respond(http.StatusCreated, "", "0x1", nil)
	})
	for _, tok := range []string{"*", `"0x1"`, `0x1", "*`, "0x1 ", "a\x00b", "\x7f"} {
		_, err := store.PutIfVersion(t.Context(), "k", []byte("x"), tok)
		require.ErrorIs(t, err, writefence.ErrConflict, "%q", tok)
		var se *writefence.StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "azblob put", se.Op)
	}
	assert.Empty(t, f.sent())
}

// TestClassification: each answer of the service maps to one sentinel, or
// none; the SDK's error stays reachable and the message is one line
// without the response body.
func TestClassification(t *testing.T) {
	body := []byte("<?xml version=\"1.0\"?><Error><Code>X</Code><Message>detail\nsecond line</Message></Error>")
	for _, c := range []struct {
		op     string // get, create, update, delete
		status int
		code   string
		want   error // nil: none of the sentinels
	}{
		{"create", 409, "BlobAlreadyExists", writefence.ErrConflict},
		{"create", 412, "ConditionNotMet", writefence.ErrConflict},
		{"update", 412, "ConditionNotMet", writefence.ErrConflict},
		{"update", 404, "BlobNotFound", writefence.ErrConflict},
		{"update", 404, "ContainerNotFound", nil},
		{"update", 412, "LeaseIdMissing", nil},
		{"create", 412, "LeaseIdMissing", nil},
		{"update", 412, "", writefence.ErrConflict},
		{"update", 401, "InvalidAuthenticationInfo", fs.ErrPermission},
		{"update", 403, "AuthorizationPermissionMismatch", fs.ErrPermission},
		{"get", 404, "BlobNotFound", writefence.ErrNotFound},
		{"get", 404, "ContainerNotFound", nil},
		{"get", 403, "AuthenticationFailed", fs.ErrPermission},
		{"delete", 403, "AuthorizationFailure", fs.ErrPermission},
		{"update", 400, "InvalidHeaderValue", nil},
	} {
		t.Run(c.op+"/"+c.code, func(t *testing.T) {
			body := body
			if c.code == "" {
				body = nil // a response without a code at all
			}
			store, _ := fakeStore(t, func(*http.Request, int) *http.Response { return respond(c.status, c.code, "", body) })
			err := kit.Call(t.Context(), store, c.op, "0x1")
			require.Error(t, err)
			kit.Sentinels(t, err, c.want, c.op)
			var re *azcore.ResponseError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, c.status, re.StatusCode)
			assert.Equal(t, c.code, re.ErrorCode)
			msg := err.Error()
			if c.code != "" {
				assert.Contains(t, msg, "("+c.code+")")
			}
			assert.NotContains(t, msg, "\n")
			assert.NotContains(t, msg, "<?xml")
		})
	}
}

// TestWriteNotRetried: a failed Put Blob is sent once, whatever the SDK's
// retry policy says (a retry of a write that landed would be refused by
// its own precondition); a failed read is retried.
func TestWriteNotRetried(t *testing.T) {
	store, f := fakeStore(t, func(*http.Request, int) *http.Response {
		return respond(http.StatusServiceUnavailable, "ServerBusy", "", nil)
	})
	_, err := store.PutIfVersion(t.Context(), "k", []byte("x"), "0x1")
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
	assert.Len(t, f.sent(), 1, "the write was sent once")

	_, _, err = store.Get(t.Context(), "k")
	require.Error(t, err)
	assert.Len(t, f.sent(), 1+3, "the read was tried three times, as the client is configured")
}

// TestReadLimit: a blob whose Content-Length is over the limit is refused
// without reading its body; GetPrefix refuses it by the total of the
// Content-Range.
func TestReadLimit(t *testing.T) {
	var bodyRead bool
	store, f := fakeStore(t, func(r *http.Request, _ int) *http.Response {
		resp := respond(http.StatusOK, "", "0x1", nil)
		resp.Body = readTracker{&bodyRead}
		if rng := header(r.Header, "x-ms-range"); rng != "" {
			resp.StatusCode = http.StatusPartialContent
			resp.Header.Set("Content-Range", "bytes 0-9/101")
			resp.Header.Set("Content-Length", "10")
		} else {
			resp.Header.Set("Content-Length", "101")
		}
		return resp
	})
	store.MaxObjectSize = 100
	_, _, err := store.Get(t.Context(), "k")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	_, _, _, err = store.GetPrefix(t.Context(), "k", 10)
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	assert.False(t, bodyRead, "no byte of the body was read")
	reqs := f.sent()
	require.Len(t, reqs, 2)
	assert.Equal(t, "bytes=0-9", header(reqs[1].header, "x-ms-range"), "GetPrefix asks for its n bytes only")
}

type readTracker struct{ read *bool }

func (r readTracker) Read([]byte) (int, error) { *r.read = true; return 0, io.EOF }
func (r readTracker) Close() error             { return nil }

// TestPrefixOfEmptyBlob: the service answers a range over an empty blob
// with 416 InvalidRange; GetPrefix then reads it unranged.
func TestPrefixOfEmptyBlob(t *testing.T) {
	store, f := fakeStore(t, func(r *http.Request, _ int) *http.Response {
		if header(r.Header, "x-ms-range") != "" {
			return respond(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "", nil)
		}
		return respond(http.StatusOK, "", "0x2", nil)
	})
	prefix, size, v, err := store.GetPrefix(t.Context(), "k", 10)
	require.NoError(t, err)
	assert.Empty(t, prefix)
	assert.Zero(t, size)
	assert.Equal(t, "0x2", v)
	assert.Len(t, f.sent(), 2)
}

// TestNoETag: a response without an ETag is an error, never a version.
func TestNoETag(t *testing.T) {
	store, _ := fakeStore(t, func(*http.Request, int) *http.Response {
		return respond(http.StatusOK, "", "", []byte("x"))
	})
	_, _, err := store.Get(t.Context(), "k")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "no etag"), err.Error())
	_, err = store.PutIfVersion(t.Context(), "k", []byte("x"), "")
	require.Error(t, err)
}

// TestBodyUnreadableAfterReturn: a transport that answers before reading
// the whole body (a service refusing a precondition early) cannot read the
// caller's bytes once PutIfVersion has returned.
func TestBodyUnreadableAfterReturn(t *testing.T) {
	var kept io.Reader
	c, err := container.NewClientWithNoCredential("http://fake.invalid/account/box", &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: transportFunc(func(r *http.Request) (*http.Response, error) {
			kept = r.Body
			resp := respond(http.StatusPreconditionFailed, "ConditionNotMet", "", nil)
			resp.Request = r
			return resp, nil
		})},
	})
	require.NoError(t, err)
	store := azblobstore.New(c)
	for _, parts := range [][][]byte{{[]byte("secret bytes")}, {[]byte("secret "), []byte("bytes")}} {
		_, err = writefence.PutParts(t.Context(), store, "k", parts, "0x1")
		require.ErrorIs(t, err, writefence.ErrConflict)
		require.NotNil(t, kept)
		n, err := kept.Read(make([]byte, 64))
		assert.Zero(t, n)
		assert.ErrorIs(t, err, io.ErrClosedPipe)
	}
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }
