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
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/minio/minio-go/v7"

	"github.com/writefence/writefence/internal/record"
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

// minioStore is a ConditionalStore over one bucket of an S3 API
// server, reached through minio-go. Version tokens are the objects' ETags
// without their quotes. It also implements Deleter.
//
// Errors: every failure is a *StoreError whose Err reaches minio-go's
// error (a minio.ErrorResponse for an answer of the server). A request
// refused for its credentials or their rights (HTTP 401, or 403
// AccessDenied, InvalidAccessKeyId or SignatureDoesNotMatch) also matches
// fs.ErrPermission: nothing was done, and a Fence does not retry it.
//
// Blobs (BlobStore): each blob is one object, written by CreateBlob as
// one PUT when it is smaller than 5 MiB, else streamed as a multipart
// upload of BlobPartSize parts; see CreateBlob.
//
// The integrity of a one-PUT blob is checked by the server: its body
// carries an MD5 (Content-MD5) until the store has seen the server refuse
// a wrong CRC-32C (x-amz-checksum-crc32c), and from then on its CRC-32C
// instead, about thirty times cheaper to compute. The first non-empty
// one-PUT blob is the test: it goes with its SHA-256 signed, no MD5, and
// a CRC-32C that does not match it. A server that checks the CRC-32C
// refuses it (400 XAmzContentChecksumMismatch on MinIO, BadDigest on
// AWS): with no MD5 sent, nothing else could have failed (a body damaged
// on its way fails its signed SHA-256, XAmzContentSHA256Mismatch, which
// teaches nothing), and the blob is sent again with its CRC-32C alone. A
// server that ignores the header stores it, its SHA-256 checked, and the
// store keeps sending MD5s, as it does to one that refuses the header
// otherwise (with a 400 or 501), after sending the blob again with its
// MD5. Either way no blob is stored unchecked. The
// store keeps what it learnt for its life: put a store value in front of
// one kind of server, not of a pool that mixes servers that check the
// CRC-32C with servers that do not. Records always carry their MD5.
//
// MaxObjectSize, when positive, is the read limit of Get (zero means
// 64 MiB + 4 KiB, the largest default payload and a record header). Set
// the fields before first use. A minioStore is safe for concurrent use.
type minioStore struct {
	MaxObjectSize int64

	// BlobPartSize is the size in bytes of the parts CreateBlob uploads,
	// and so what a blob write holds in memory: one part. Zero means 16
	// MiB. S3 takes at most 10,000 parts, so it also bounds the largest
	// blob at 10,000 parts (about 156 GiB at 16 MiB; raise it for larger
	// blobs); it must be 5 MiB to 5 GiB, S3's limits for a part.
	BlobPartSize int64

	api    s3API
	bucket string

	// crc is what the store knows of the server's check of a blob's
	// CRC-32C: one of the s3CRC states.
	crc atomic.Int32
}

// The states of minioStore.crc.
const (
	s3CRCUnknown int32 = iota // not tested yet: blobs carry their MD5
	s3CRCTesting              // one blob is testing it: the others carry their MD5
	s3CRCChecked              // the server refused a wrong CRC-32C: blobs carry theirs
	s3CRCIgnored              // the server stored a blob with a wrong one: blobs carry their MD5
)

var _ ConditionalStore = (*minioStore)(nil)

var _ Capable = (*minioStore)(nil)

// Capabilities implements Capable: the store's PrefixReader, PartsPutter
// and BlobStore are its own.
func (s *minioStore) Capabilities() ConditionalStore { return s }

// versionNamesBytes declares bytesNamed: a version is the bytes' ETag.
func (s *minioStore) versionNamesBytes() {}

// NewMinioConditionalStore returns a store that keeps its objects in bucket,
// which must exist, using the caller's client. The server must honour
// If-None-Match: * and If-Match: "etag" on a PUT, as AWS S3 and MinIO do;
// some S3-compatible services ignore them, so probe a server first (Probe).
// A record is one PUT of its exact length (up to 5 GiB) with its MD5 and
// signed SHA-256, never aws-chunked, sent once: a retry of a PUT that landed
// would fail its own precondition. Reads are retried as the client says.
func NewMinioConditionalStore(client *minio.Client, bucket string, opts *StoreOptions) ConditionalStore {
	return newMinioStore(client, bucket, opts)
}

func newMinioStore(client *minio.Client, bucket string, opts *StoreOptions) *minioStore {
	s := &minioStore{api: minio.Core{Client: client}, bucket: bucket}
	if opts != nil {
		s.MaxObjectSize, s.BlobPartSize = opts.MaxObjectSize, opts.BlobPartSize
	}
	return s
}

// Get implements ConditionalStore with one GET: the bytes and the ETag come
// from the same response. An object whose Content-Length exceeds the limit
// is refused before its body is read; otherwise at most the limit plus one
// byte is read.
func (s *minioStore) Get(ctx context.Context, key string) ([]byte, string, error) {
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

var _ PrefixReader = (*minioStore)(nil)

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
func (s *minioStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", storeErr("s3 get", key, nil, invalidArg("n", "%d, must be at least 1", n))
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
func (s *minioStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

var _ PartsPutter = (*minioStore)(nil)

// PutPartsIfVersion implements PartsPutter: the parts are sent one after
// the other as the body of one PUT of their total length, with the
// preconditions of PutIfVersion, and never copied; the body is sent as
// NewMinioConditionalStore says.
func (s *minioStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
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
	info, err := s.putWhole(ctx, key, parts, true, s3SumMD5, opts)
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

// s3BodySum names the digest of a PUT's body that the server checks.
type s3BodySum int

const (
	s3SumMD5  s3BodySum = iota // Content-MD5
	s3SumCRC                   // x-amz-checksum-crc32c, and no MD5
	s3SumTest                  // an x-amz-checksum-crc32c that does not match the body, and no MD5: signed
)

// putWhole sends parts, one after the other, as the body of one PUT with
// opts, once, and never copies them. The request carries the body's exact
// length (Content-Length, 0 for an empty body), the digest sum names
// (Content-MD5 or x-amz-checksum-crc32c, or both) and, when signed, its
// SHA-256, signed (X-Amz-Content-Sha256), else UNSIGNED-PAYLOAD; what it
// carries is computed here and checked by the server. Left to itself,
// minio-go would sign the body over plain HTTP in aws-chunked chunks, and
// send an empty one as HTTP chunked with no Content-Length at all, which
// a server that requires a length refuses (411) and one that does not
// decode aws-chunked cannot read; and a client built with TrailingHeaders
// would frame it as aws-chunked to append a checksum trailer, over HTTPS
// too. A Content-MD5, or a checksum header of our own, is what keeps
// minio-go from adding that trailer.
//
// minio-go retries only a body it can rewind; this body cannot be
// rewound, so the PUT is sent exactly once (see NewMinioConditionalStore).
func (s *minioStore) putWhole(ctx context.Context, key string, parts [][]byte, signed bool, sum s3BodySum, opts minio.PutObjectOptions) (minio.UploadInfo, error) {
	sha, md := sha256.New(), md5.New()
	var crc uint32
	readers := make([]io.Reader, len(parts))
	size := int64(0)
	for i, p := range parts {
		if signed {
			sha.Write(p)
		}
		if sum == s3SumCRC || sum == s3SumTest {
			crc = crc32.Update(crc, record.Castagnoli, p)
		}
		if sum == s3SumMD5 {
			md.Write(p)
		}
		readers[i] = bytes.NewReader(p)
		size += int64(len(p))
	}
	shaHex, mdBase64 := "", ""
	if signed {
		shaHex = hex.EncodeToString(sha.Sum(nil))
	}
	if sum == s3SumMD5 {
		mdBase64 = base64.StdEncoding.EncodeToString(md.Sum(nil))
	}
	if sum == s3SumTest {
		crc = ^crc
	}
	if sum != s3SumMD5 {
		// A header of the caller's own: minio-go adds no trailer beside it.
		meta := make(map[string]string, len(opts.UserMetadata)+1)
		maps.Copy(meta, opts.UserMetadata)
		meta[s3CRCHeader] = base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc))
		opts.UserMetadata = meta
	}
	opts.DisableContentSha256 = true
	body := &requestBody{r: io.MultiReader(readers...)}
	info, err := s.api.PutObject(ctx, s.bucket, key, body, size, mdBase64, shaHex, opts)
	body.close()
	return info, err
}

// s3CRCHeader carries a body's CRC-32C, big-endian, in base64.
const s3CRCHeader = "x-amz-checksum-crc32c"

// putBlob sends body, a blob under 5 MiB, as one PUT with opts, with the
// digest the store's knowledge of the server calls for (see minioStore),
// testing the server with it when nothing is known yet. Under 1 MiB, and
// when it tests, its SHA-256 is signed too.
func (s *minioStore) putBlob(ctx context.Context, key string, body []byte, opts minio.PutObjectOptions) (minio.UploadInfo, error) {
	parts, signed := [][]byte{body}, len(body) < s3SmallBlob
	state := s.crc.Load()
	switch {
	case len(body) == 0:
		return s.putWhole(ctx, key, parts, signed, s3SumMD5, opts)
	case state == s3CRCChecked:
		return s.putWhole(ctx, key, parts, signed, s3SumCRC, opts)
	case state != s3CRCUnknown || !s.crc.CompareAndSwap(s3CRCUnknown, s3CRCTesting):
		return s.putWhole(ctx, key, parts, signed, s3SumMD5, opts)
	}
	info, err := s.putWhole(ctx, key, parts, true, s3SumTest, opts)
	var r minio.ErrorResponse
	switch {
	case err == nil:
		s.crc.Store(s3CRCIgnored)
		return info, nil
	case !errors.As(err, &r):
		s.crc.Store(s3CRCUnknown)
		return info, err
	case s3CRCRefused(r):
		// Nothing was stored, and the CRC-32C is the only digest sent
		// that the refusal can name: the test carries no MD5, and its
		// signed SHA-256 has a refusal of its own.
		s.crc.Store(s3CRCChecked)
		return s.putWhole(ctx, key, parts, signed, s3SumCRC, opts)
	case r.Code != "XAmzContentSHA256Mismatch" && (r.Code == "NotImplemented" || r.StatusCode == http.StatusBadRequest || r.StatusCode == http.StatusNotImplemented):
		// A server that refuses the header, whatever it calls the
		// refusal: nothing was stored. The blob goes again with its MD5,
		// and so does every later one once the server takes it, so that a
		// refusal of the test alone never fails every blob.
		info, err = s.putWhole(ctx, key, parts, signed, s3SumMD5, opts)
		if err == nil {
			s.crc.Store(s3CRCIgnored)
			return info, nil
		}
	}
	// A body damaged on its way (XAmzContentSHA256Mismatch), a blob at
	// the key, the network: nothing learnt.
	s.crc.Store(s3CRCUnknown)
	return info, err
}

// s3CRCRefused reports whether r refuses a body for a checksum that did
// not match it: MinIO's code, and AWS's.
func s3CRCRefused(r minio.ErrorResponse) bool {
	return r.Code == "XAmzContentChecksumMismatch" || r.Code == "BadDigest"
}

var _ Deleter = (*minioStore)(nil)

// Delete implements Deleter. S3 reports success for a key that does not
// exist; a NoSuchKey from a stricter server is treated the same way.
func (s *minioStore) Delete(ctx context.Context, key string) error {
	return s.remove(ctx, "delete", key)
}

// remove deletes key for op; a missing key is not an error.
func (s *minioStore) remove(ctx context.Context, op, key string) error {
	err := s.api.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err == nil {
		return nil
	}
	var r minio.ErrorResponse
	if errors.As(err, &r) && r.Code == s3NoSuchKey {
		return nil
	}
	return s.fail(ctx, op, key, err, nil)
}

// fail wraps an SDK error. kind, when non-nil, names the sentinel an S3
// error response stands for; a refusal of the credentials is
// fs.ErrPermission whatever the operation (see s3Refused), and a missing
// bucket errors.ErrUnsupported, which no retry changes. A done context
// is returned as it is, so cancellation is never mistaken for an answer
// from the server.
func (s *minioStore) fail(ctx context.Context, op, key string, err error, kind func(minio.ErrorResponse) error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var sentinel error
	var r minio.ErrorResponse
	if errors.As(err, &r) {
		if kind != nil {
			sentinel = kind(r)
		}
		switch {
		case sentinel != nil:
		case s3Refused(r):
			sentinel = fs.ErrPermission
		case r.Code == "NoSuchBucket":
			// No retry creates it: the store is not one this adapter
			// can serve until the bucket exists.
			sentinel = errors.ErrUnsupported
			err = fmt.Errorf("the bucket %s does not exist (create it, as writefence init does): %w", esc(s.bucket), err)
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
	errNoSDK    = errors.New("the store's client is not minio-go's own")
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

var _ Lister = (*minioStore)(nil)

// List implements Lister with the client's ListObjects (version 2 of the
// API), recursively under prefix, in the server's order (lexical on S3).
// It needs the store's client to be minio-go's own (as
// NewMinioConditionalStore sets it): Core's list calls take no context.
func (s *minioStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	return s.list(ctx, "list", prefix, "", func(obj minio.ObjectInfo) error { return fn(obj.Key) })
}

// list calls fn with each object under prefix, for op. The listing is
// minio-go's iterator, not its channel, whose goroutine would block for
// good when fn stops the listing early.
func (s *minioStore) list(ctx context.Context, op, prefix, after string, fn func(minio.ObjectInfo) error) error {
	c, err := s.sdk(op, prefix)
	if err != nil {
		return err
	}
	for obj := range c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, StartAfter: after, Recursive: true}) {
		if obj.Err != nil {
			return s.fail(ctx, op, prefix, obj.Err, nil)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(obj); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// sdk returns the store's minio-go client, for what Core does not offer:
// a listing that takes a context, and an upload of unknown size in parts.
func (s *minioStore) sdk(op, key string) (*minio.Client, error) {
	core, ok := s.api.(minio.Core)
	if !ok || core.Client == nil {
		return nil, storeErr("s3 "+op, key, errors.ErrUnsupported, errNoSDK)
	}
	return core.Client, nil
}

// S3's limits on the size of a part of a multipart upload, and the
// default part size of a blob.
const (
	s3MinPartSize         = 5 << 20
	s3MaxPartSize         = 5 << 30
	s3DefaultBlobPartSize = 16 << 20
)

var _ BlobStore = (*minioStore)(nil)

// s3SmallBlob is the size under which a blob is sent as one PUT whose
// signature covers its SHA-256; s3OnePutBlob, S3's least part size, the
// size under which it is sent as one PUT at all.
const (
	s3SmallBlob  = 1 << 20
	s3OnePutBlob = s3MinPartSize
)

// CreateBlob implements BlobStore. It reads r's first 5 MiB (the least
// part S3 takes); a blob that ends within them (an empty one included) is
// sent as a record is: one PUT of its exact length, never aws-chunked,
// with If-None-Match: *, and once: a retry after a PUT that landed would
// be refused by its own precondition; it carries its MD5 or its CRC-32C
// (see minioStore). Under 1 MiB, and on the CRC-32C test whatever its
// size, the PUT's signature covers the blob's SHA-256 too; else it goes
// as UNSIGNED-PAYLOAD, as the parts below do, for the same reason (the
// hash of a 4 MiB segment costs more than its PUT on a fast link, and the
// blob's CRC-32C checks it end to end).
// A larger blob is streamed with minio-go's PutObject of unknown size: a
// multipart upload whose parts of BlobPartSize bytes are read into one
// buffer, one at a time, so the write holds one part (and the first 5
// MiB) in memory whatever the blob's size; each part is retried as the client
// is configured. Each part goes whole as UNSIGNED-PAYLOAD
// (DisableContentSha256), as minio-go sends it over HTTPS anyway: over
// plain HTTP it would sign it in 64 KiB chunks (aws-chunked), whose
// framing makes garbage as it goes (here about 90 KiB for every MiB
// sent), which the collector lets pile up to the size of what is live, so
// the heap would reach two parts between collections instead of one. What
// that signature checked at the server, the blob's CRC-32C checks end to
// end: it travels in the blob's reference and every read is checked
// against it (Fence.OpenBlob), so bytes damaged on their way in are never
// read as good; they are found at the read instead of refused at the
// upload. A failure, r's included, aborts the upload, and nothing is
// created. The blob's info is then read with one HEAD, matched to the
// ETag of the write: the size and the LastModified the server records, at
// the second resolution of the HTTP date it is sent in.
//
// Create-only: a single PUT with If-None-Match: * is refused by the server
// when the key exists (412, an error matching ErrConflict), on MinIO as on
// AWS. In a multipart upload minio-go sends the header on the request that
// starts it (CreateMultipartUpload), not on the one that completes it.
// MinIO refuses there, with 412, to start an upload to a key that exists:
// CreateBlob returns an error matching ErrConflict, having sent no part.
// Nothing checks the key when the upload completes, so an object created
// at the key while the upload runs is replaced; and AWS S3 ignores the
// header on CreateMultipartUpload, so there a large CreateBlob over an
// existing key replaces it. Neither matters to a Fence, whose every blob
// key is new.
func (s *minioStore) CreateBlob(ctx context.Context, key string, r io.Reader) (BlobInfo, error) {
	up, _, err := s.upload(ctx, key, r)
	if err != nil {
		return BlobInfo{}, err
	}
	return s.uploaded(ctx, key, up)
}

var _ BlobWriter = (*minioStore)(nil)

// WriteBlob implements BlobWriter: CreateBlob without the HEAD after a
// blob sent as one PUT (under 5 MiB), whose size is the Content-Length of
// the PUT the server accepted, with the body's MD5 or CRC-32C it
// checked, so the bytes it holds are the bytes sent. A blob sent in parts is still read
// with the HEAD, for the size the server put together. PutBlob writes
// through it: a 64 KiB segment is one request.
func (s *minioStore) WriteBlob(ctx context.Context, key string, r io.Reader) (int64, error) {
	up, one, err := s.upload(ctx, key, r)
	if err != nil {
		return 0, err
	}
	if one {
		return up.Size, nil
	}
	info, err := s.uploaded(ctx, key, up)
	return info.Size, err
}

// upload sends the blob at key for CreateBlob and WriteBlob, and says
// whether it went as one PUT (its size then the one sent).
func (s *minioStore) upload(ctx context.Context, key string, r io.Reader) (minio.UploadInfo, bool, error) {
	c, err := s.sdk("blob create", key)
	if err != nil {
		return minio.UploadInfo{}, false, err
	}
	part := s.BlobPartSize
	if part == 0 {
		part = s3DefaultBlobPartSize
	}
	if part < s3MinPartSize || part > s3MaxPartSize {
		return minio.UploadInfo{}, false, storeErr("s3 blob create", key, nil,
			invalidArg("BlobPartSize", "%d bytes, must be %d to %d", part, s3MinPartSize, s3MaxPartSize))
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	opts.SetMatchETagExcept("*")
	// The caller's reader failing with io.ErrUnexpectedEOF (a truncated
	// gzip stream) is no end of the blob: io.ReadFull, here and in
	// minio-go's parts, would take it for one.
	r = sourceFailures{r}
	head, err := readBlobHead(r)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return minio.UploadInfo{}, false, ctxErr
		}
		return minio.UploadInfo{}, false, storeErr("s3 blob create", key, nil, err)
	}
	var up minio.UploadInfo
	one := len(head) < s3OnePutBlob
	if one {
		up, err = s.putBlob(ctx, key, head, opts)
		up.Size = int64(len(head))
	} else {
		opts.PartSize = uint64(part)
		opts.DisableContentSha256 = true
		up, err = c.PutObject(ctx, s.bucket, key, io.MultiReader(bytes.NewReader(head), r), -1, opts)
	}
	if err != nil {
		return minio.UploadInfo{}, false, s.fail(ctx, "blob create", key, err, blobCreateKind)
	}
	return up, one, nil
}

// sourceFailures passes on its reader's bytes and io.EOF, and wraps any
// other error, so that no reader of it takes the error for an end; the
// error still matches the reader's (errors.Is).
type sourceFailures struct{ r io.Reader }

func (s sourceFailures) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &sourceError{err: err}
	}
	return n, err
}

// sourceError is an error of the caller's reader.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return "reading the blob: " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// readBlobHead reads r's first s3OnePutBlob bytes, or all of r when it
// ends before them. Under s3SmallBlob it grows its buffer as io.ReadAll
// does, so a small blob costs about its size; past it, it reads into one
// buffer of s3OnePutBlob bytes, allocated once, where io.ReadAll's growth
// would allocate about twice that as garbage, beside the part buffer of a
// larger blob's upload.
func readBlobHead(r io.Reader) ([]byte, error) {
	small, err := io.ReadAll(io.LimitReader(r, s3SmallBlob))
	if err != nil || len(small) < s3SmallBlob {
		return small, err
	}
	head := make([]byte, s3OnePutBlob)
	copy(head, small)
	n, err := io.ReadFull(r, head[len(small):])
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return head[:len(small)+n], err
}

// uploaded reads the info of the blob upload put at key, with one HEAD
// matched to the upload's ETag.
func (s *minioStore) uploaded(ctx context.Context, key string, up minio.UploadInfo) (BlobInfo, error) {
	c, err := s.sdk("blob create", key)
	if err != nil {
		return BlobInfo{}, err
	}
	var statOpts minio.StatObjectOptions
	if etag := normalizeETag(up.ETag); validETag(etag) {
		if err := statOpts.SetMatchETag(etag); err != nil {
			return BlobInfo{}, s.fail(ctx, "blob create", key, err, nil)
		}
	}
	st, err := c.StatObject(ctx, s.bucket, key, statOpts)
	if err != nil {
		return BlobInfo{}, s.fail(ctx, "blob create", key, fmt.Errorf("the blob was uploaded, its info could not be read: %w", err), nil)
	}
	return BlobInfo{Key: key, Size: st.Size, Modified: st.LastModified}, nil
}

// blobCreateKind: a refused If-None-Match is a conflict, as for a put.
func blobCreateKind(r minio.ErrorResponse) error { return putKind(r, "") }

// OpenBlob implements BlobStore with one GET: the body, the size (its
// Content-Length) and the LastModified (second resolution) come from the
// same response. A read of the body that fails returns a *StoreError of
// op "s3 blob read", and a done context its own error.
func (s *minioStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, BlobInfo, error) {
	body, info, _, err := s.api.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, BlobInfo{}, s.fail(ctx, "blob open", key, err, getKind)
	}
	if info.Size < 0 {
		body.Close()
		return nil, BlobInfo{}, storeErr("s3 blob open", key, nil, errors.New("response carries no object size"))
	}
	return &s3BlobBody{body: body, key: key}, BlobInfo{Key: key, Size: info.Size, Modified: info.LastModified}, nil
}

// s3BlobBody is the body of a blob's GET, whose failures are
// *StoreErrors.
type s3BlobBody struct {
	body io.ReadCloser
	key  string
}

func (b *s3BlobBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		err = storeErr("s3 blob read", b.key, nil, err)
	}
	return n, err
}

func (b *s3BlobBody) Close() error { return b.body.Close() }

// StatBlob implements BlobStore with one HEAD: the size and the
// LastModified (second resolution) the server records.
func (s *minioStore) StatBlob(ctx context.Context, key string) (BlobInfo, error) {
	c, err := s.sdk("blob stat", key)
	if err != nil {
		return BlobInfo{}, err
	}
	st, err := c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return BlobInfo{}, s.fail(ctx, "blob stat", key, err, getKind)
	}
	return BlobInfo{Key: key, Size: st.Size, Modified: st.LastModified}, nil
}

// ListBlobs implements BlobStore with the client's ListObjects (version 2
// of the API), recursively under prefix, in the server's order. Each
// blob's size and LastModified come from the listing, whose times are
// finer than a HEAD's (milliseconds on MinIO and AWS): a blob's Modified
// here is at or after its Modified from CreateBlob or StatBlob, within the
// second that one names, so an age Collect computes is never more than
// the listing's rounding too large.
func (s *minioStore) ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	return s.listBlobs(ctx, prefix, "", fn)
}

func (s *minioStore) listBlobs(ctx context.Context, prefix, after string, fn func(BlobInfo) error) error {
	return s.list(ctx, "blob list", prefix, after, func(obj minio.ObjectInfo) error {
		return fn(BlobInfo{Key: obj.Key, Size: obj.Size, Modified: obj.LastModified})
	})
}

var _ ConsistentBlobLister = (*minioStore)(nil)

// ListBlobsConsistent implements ConsistentBlobLister with ListBlobs, from
// StartAfter: AWS S3 (since December 2020) and MinIO list every object
// whose write returned before the listing began, and none whose delete
// did. A server whose listing lags behind its writes must be used through
// a wrapper that does not declare it (see Capable).
func (s *minioStore) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(BlobInfo) error) error {
	return s.listBlobs(ctx, prefix, after, fn)
}

// DeleteBlob implements BlobStore, as Delete does.
func (s *minioStore) DeleteBlob(ctx context.Context, key string) error {
	return s.remove(ctx, "blob delete", key)
}

var _ BlobBatchDeleter = (*minioStore)(nil)

// DeleteBlobs implements BlobBatchDeleter with the client's
// RemoveObjectsWithIter: one DeleteObjects request (a POST of the keys)
// for every 1,000 keys, S3's limit, in which a missing key counts as
// deleted. A key whose name XML cannot carry is deleted with a DELETE of
// its own, by the client. The error names the first key the server did
// not delete, and how many were left.
func (s *minioStore) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	c, err := s.sdk("blob delete", "")
	if err != nil {
		return nil, err
	}
	objects := func(yield func(minio.ObjectInfo) bool) {
		for _, k := range keys {
			if !yield(minio.ObjectInfo{Key: k}) {
				return
			}
		}
	}
	results, err := c.RemoveObjectsWithIter(ctx, s.bucket, objects, minio.RemoveObjectsOptions{})
	if err != nil {
		return nil, s.fail(ctx, "blob delete", "", err, nil)
	}
	deleted := make([]string, 0, len(keys))
	var failedKey string
	var failed error
	for r := range results {
		var er minio.ErrorResponse
		switch {
		case r.Err == nil, errors.As(r.Err, &er) && er.Code == s3NoSuchKey:
			deleted = append(deleted, r.ObjectName)
		case failed == nil:
			failedKey, failed = r.ObjectName, r.Err
		}
	}
	// A reply is trusted only for the keys it was asked, each once.
	deleted, left := answered(keys, deleted)
	switch {
	case failed != nil:
		return deleted, s.fail(ctx, "blob delete", failedKey, fmt.Errorf("%d of %d keys left: %w", len(keys)-len(deleted), len(keys), failed), nil)
	case ctx.Err() != nil && left != "":
		return deleted, ctx.Err()
	case left != "":
		return deleted, storeErr("s3 blob delete", left, nil, fmt.Errorf("the server answered for %d of %d keys, not this one", len(deleted), len(keys)))
	}
	return deleted, nil
}
