package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
)

// s3API is the part of minio-go the adapter uses. minio.Core implements it;
// tests substitute their own. Core's GetObject and PutObject are used rather
// than Client's because each is exactly one HTTP exchange: the body and the
// ETag come from one response, and a record is never split into a multipart
// upload, whose preconditions not every server honours.
type s3API interface {
	GetObject(ctx context.Context, bucket, key string, opts minio.GetObjectOptions) (io.ReadCloser, minio.ObjectInfo, http.Header, error)
	PutObject(ctx context.Context, bucket, key string, data io.Reader, size int64, md5Base64, sha256Hex string, opts minio.PutObjectOptions) (minio.UploadInfo, error)
	RemoveObject(ctx context.Context, bucket, key string, opts minio.RemoveObjectOptions) error
}

// S3 error codes the adapter classifies. minio-go names the first two; AWS
// answers the third to conditional writes racing on one key.
const (
	s3NoSuchKey                  = minio.NoSuchKey
	s3PreconditionFailed         = minio.PreconditionFailed
	s3ConditionalRequestConflict = "ConditionalRequestConflict"
)

// MinioConditionalStore is a ConditionalStore over one bucket of an S3 API
// server, reached through minio-go. Version tokens are the objects' ETags
// without their quotes. It also implements Deleter.
//
// Errors: every failure is a *StoreError whose Err reaches minio-go's
// error (a minio.ErrorResponse for an answer of the server). A request
// refused for its credentials or their rights (HTTP 401, or 403
// AccessDenied, InvalidAccessKeyId or SignatureDoesNotMatch) also matches
// fs.ErrPermission: nothing was done, and a Fence does not retry it.
//
// MaxObjectSize, when positive, is the read limit of Get (zero means
// defaultMaxObjectSize); set it before first use. A MinioConditionalStore is
// safe for concurrent use.
type MinioConditionalStore struct {
	MaxObjectSize int64

	api    s3API
	bucket string
}

var _ ConditionalStore = (*MinioConditionalStore)(nil)

var _ Capable = (*MinioConditionalStore)(nil)

// Capabilities implements Capable: the store's PrefixReader and
// PartsPutter are its own.
func (s *MinioConditionalStore) Capabilities() ConditionalStore { return s }

// NewMinioConditionalStore returns a store that keeps its objects in bucket,
// which must exist, using the caller's client.
//
// The server must implement S3 conditional writes: a PUT carrying
// If-None-Match: * is refused when the key exists, and a PUT carrying
// If-Match: "etag" is refused unless the key's current ETag is etag. AWS S3
// supports both since 2024, and MinIO does; several other S3-compatible
// services accept the headers and ignore them, which would make every write
// unconditional, so check a server before trusting it.
//
// Every record is sent as one PUT of its exact length, whatever its size
// (S3 accepts up to 5 GiB that way), never as a multipart upload. A
// conditional PUT is sent once: the SDK's own retries are not used for it,
// because a retry after a write that landed but whose answer was lost would
// be refused by the write's own precondition and reported as a conflict.
// Reads are retried as the client is configured.
func NewMinioConditionalStore(client *minio.Client, bucket string) *MinioConditionalStore {
	return &MinioConditionalStore{api: minio.Core{Client: client}, bucket: bucket}
}

// Get implements ConditionalStore with one GET: the bytes and the ETag come
// from the same response. An object whose Content-Length exceeds the limit
// is refused before its body is read; otherwise at most the limit plus one
// byte is read.
func (s *MinioConditionalStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	body, info, _, err := s.api.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", s.fail(ctx, "get", key, err, getKind)
	}
	defer body.Close()

	limit := readLimit(s.MaxObjectSize)
	if info.Size > limit {
		return nil, "", tooLarge("s3 get", key, limit)
	}
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, "", s.fail(ctx, "get", key, err, nil)
	}
	if int64(len(data)) > limit {
		return nil, "", tooLarge("s3 get", key, limit)
	}
	etag := normalizeETag(info.ETag)
	if etag == "" {
		return nil, "", storeErr("s3 get", key, nil, errNoETag)
	}
	return data, etag, nil
}

var _ PrefixReader = (*MinioConditionalStore)(nil)

// GetPrefix implements PrefixReader with one ranged GET (Range: bytes=0-n-1):
// the prefix, the ETag and the object's total size, the total of the
// Content-Range, come from the same response. A server that ignores the
// range and answers 200 is read the same way, at most n bytes, the size then
// being the Content-Length.
//
// An empty object has no byte 0, so S3 answers the range with 416
// InvalidRange; GetPrefix then sends one unranged GET and reads at most n
// bytes of it, so a key rewritten in between is still read from a single
// response. As Get, it refuses an object larger than the read limit, here
// without reading its body.
func (s *MinioConditionalStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", invalidArg("n", "%d, must be at least 1", n)
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(0, n-1); err != nil {
		return nil, 0, "", s.fail(ctx, "get", key, err, nil)
	}
	body, info, header, err := s.api.GetObject(ctx, s.bucket, key, opts)
	var r minio.ErrorResponse
	if err != nil && errors.As(err, &r) && (r.StatusCode == http.StatusRequestedRangeNotSatisfiable || r.Code == minio.InvalidRange) {
		body, info, header, err = s.api.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	}
	if err != nil {
		return nil, 0, "", s.fail(ctx, "get", key, err, getKind)
	}
	defer body.Close()

	size, err := s3ObjectSize(header, info.Size)
	if err != nil {
		return nil, 0, "", storeErr("s3 get", key, nil, err)
	}
	if limit := readLimit(s.MaxObjectSize); size > limit {
		return nil, 0, "", tooLarge("s3 get", key, limit)
	}
	prefix, err := io.ReadAll(io.LimitReader(body, n))
	if err != nil {
		return nil, 0, "", s.fail(ctx, "get", key, err, nil)
	}
	if want := min(n, size); int64(len(prefix)) != want {
		return nil, 0, "", storeErr("s3 get", key, nil,
			fmt.Errorf("read %d bytes of the first %d of a %d-byte object", len(prefix), want, size))
	}
	etag := normalizeETag(info.ETag)
	if etag == "" {
		return nil, 0, "", storeErr("s3 get", key, nil, errNoETag)
	}
	return prefix, size, etag, nil
}

// s3ObjectSize returns the object's total size from a GET response: the
// total of its Content-Range when it has one (a 206), else its
// Content-Length, contentLength.
func s3ObjectSize(header http.Header, contentLength int64) (int64, error) {
	cr := header.Get("Content-Range")
	if cr == "" {
		if contentLength < 0 {
			return 0, errors.New("response carries no object size")
		}
		return contentLength, nil
	}
	_, total, ok := strings.Cut(cr, "/")
	size, err := strconv.ParseInt(total, 10, 64)
	if !ok || !strings.HasPrefix(cr, "bytes ") || err != nil || size < 0 {
		return 0, fmt.Errorf("response carries a Content-Range without a total size: %s", esc(cr))
	}
	return size, nil
}

// PutIfVersion implements ConditionalStore with one conditional PUT:
// If-None-Match: * when expectVersion is empty, If-Match otherwise. A 412,
// a 409 ConditionalRequestConflict, and a 404 NoSuchKey answering If-Match
// (MinIO's reply for a key that does not exist) are conflicts.
func (s *MinioConditionalStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

var _ PartsPutter = (*MinioConditionalStore)(nil)

// PutPartsIfVersion implements PartsPutter: the parts are sent one after
// the other as the body of one PUT, with the preconditions of PutIfVersion,
// and never copied.
func (s *MinioConditionalStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
	var opts minio.PutObjectOptions
	if expectVersion == "" {
		opts.SetMatchETagExcept("*")
	} else {
		// A token that no ETag can equal is a conflict by definition; it
		// must not reach the header, where "*" or an embedded quote and
		// comma would turn If-Match into a wider condition.
		if !validETag(expectVersion) {
			return "", storeErr("s3 put", key, ErrConflict, errBadToken)
		}
		opts.SetMatchETag(expectVersion)
	}
	// minio-go retries only a body it can rewind; a body without Seek is
	// sent exactly once (see NewMinioConditionalStore).
	readers := make([]io.Reader, len(parts))
	size := int64(0)
	for i, p := range parts {
		readers[i] = bytes.NewReader(p)
		size += int64(len(p))
	}
	body := &requestBody{r: io.MultiReader(readers...)}
	info, err := s.api.PutObject(ctx, s.bucket, key, body, size, "", "", opts)
	body.close()
	if err != nil {
		return "", s.fail(ctx, "put", key, err, func(r minio.ErrorResponse) error {
			return putKind(r, expectVersion)
		})
	}
	etag := normalizeETag(info.ETag)
	if etag == "" {
		return "", storeErr("s3 put", key, nil, errNoETag)
	}
	return etag, nil
}

var _ Deleter = (*MinioConditionalStore)(nil)

// Delete implements Deleter. S3 reports success for a key that does not
// exist; a NoSuchKey from a stricter server is treated the same way.
func (s *MinioConditionalStore) Delete(ctx context.Context, key string) error {
	err := s.api.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err == nil {
		return nil
	}
	var r minio.ErrorResponse
	if errors.As(err, &r) && r.Code == s3NoSuchKey {
		return nil
	}
	return s.fail(ctx, "delete", key, err, nil)
}

// fail wraps an SDK error. kind, when non-nil, names the sentinel an S3
// error response stands for; a refusal of the credentials is
// fs.ErrPermission whatever the operation (see s3Refused). A done context
// is returned as it is, so cancellation is never mistaken for an answer
// from the server.
func (s *MinioConditionalStore) fail(ctx context.Context, op, key string, err error, kind func(minio.ErrorResponse) error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var sentinel error
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		if kind != nil {
			sentinel = kind(r)
		}
		if sentinel == nil && s3Refused(r) {
			sentinel = fs.ErrPermission
		}
	}
	return storeErr("s3 "+op, key, sentinel, err)
}

// s3Refused reports whether an S3 error response refuses the caller's
// credentials or their rights: the request was not carried out, and
// sending it again with the same credentials will be refused again. A 403
// for another reason (a skewed clock, an archived object) is not one.
func s3Refused(r minio.ErrorResponse) bool {
	switch {
	case r.StatusCode == http.StatusUnauthorized:
		return true
	case r.Code == minio.AccessDenied, r.Code == minio.InvalidAccessKeyID, r.Code == minio.SignatureDoesNotMatch:
		return true
	}
	return false
}

// getKind: only a missing key is ErrNotFound. A missing bucket is a
// misconfiguration, and calling it "not found" would invite a create.
func getKind(r minio.ErrorResponse) error {
	if r.Code == s3NoSuchKey {
		return ErrNotFound
	}
	return nil
}

func putKind(r minio.ErrorResponse, expectVersion string) error {
	switch {
	case r.StatusCode == http.StatusPreconditionFailed, r.Code == s3PreconditionFailed:
		return ErrConflict
	case r.Code == s3ConditionalRequestConflict:
		return ErrConflict
	case r.Code == s3NoSuchKey && expectVersion != "":
		return ErrConflict
	}
	return nil
}

var (
	errNoETag   = errors.New("response carries no etag")
	errBadToken = errors.New("version token cannot be an s3 etag")
	errNoList   = errors.New("the store's client cannot list objects")
)

// normalizeETag strips the quotes S3 puts around an ETag, so the token is
// the same whichever response or SDK path it came from.
func normalizeETag(etag string) string {
	if len(etag) >= 2 && etag[0] == '"' && etag[len(etag)-1] == '"' {
		return etag[1 : len(etag)-1]
	}
	return etag
}

// validETag reports whether v can be the inside of an entity tag (RFC 9110
// etagc: visible ASCII other than the double quote, or obs-text), and is not
// the wildcard.
func validETag(v string) bool {
	if v == "*" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c == '"' || c == 0x7f {
			return false
		}
	}
	return true
}

// requestBody is a PUT body that cannot be read once PutIfVersion returns.
// net/http may go on reading a request body after the response arrived (a
// server that answers 412 before the upload ends), which would otherwise
// read the caller's slice after we handed it back.
type requestBody struct {
	mu     sync.Mutex // held across each Read so close waits for it
	r      io.Reader
	closed bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.ErrClosedPipe
	}
	return b.r.Read(p)
}

func (b *requestBody) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

var _ Lister = (*MinioConditionalStore)(nil)

// List implements Lister with the client's ListObjects (version 2 of the
// API), recursively under prefix, in the server's order (lexical on S3).
// It needs the store's client to be minio-go's own (as
// NewMinioConditionalStore sets it): Core's list calls take no context.
func (s *MinioConditionalStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	core, ok := s.api.(minio.Core)
	if !ok || core.Client == nil {
		return storeErr("s3 list", prefix, errors.ErrUnsupported, errNoList)
	}
	// The SDK's goroutine feeds the channel with sends that may not look
	// at the context: when List stops early it cancels the listing and
	// drains the channel, so the goroutine ends instead of blocking.
	lctx, cancel := context.WithCancel(ctx)
	objects := core.Client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true})
	defer func() {
		cancel()
		for range objects {
		}
	}()
	for obj := range objects {
		if obj.Err != nil {
			return s.fail(ctx, "list", prefix, obj.Err, nil)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(obj.Key); err != nil {
			return err
		}
	}
	return ctx.Err()
}
