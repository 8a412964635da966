package writefence

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/writefence/writefence/internal/record"
)

// The blobs of dirStore (BlobStore): one file per blob under
// blobs/, reached through the directory the store value opened.

// The blob file format, version 1. Integers are big-endian.
//
//	offset   size  field
//	0        4     magic "WFB\x00"
//	4        1     format version (1)
//	5        2     key length K
//	7        K     key
//	7+K      N     data
//	7+K+N    8     data length N
//	15+K+N   4     CRC-32C of bytes [0, 15+K+N)
//
// The length follows the data because a blob is streamed: it is known
// only at its end. The file's own size must agree with it.
const (
	dirBlobMagic      = "WFB\x00"
	dirBlobVersion    = 1
	dirBlobHeaderSize = 7
	dirBlobTailSize   = 12
	dirBlobBuffer     = 256 << 10 // what a blob write holds in memory
)

var _ BlobStore = (*dirStore)(nil)

// blobName returns the name of the blob key's file in blobs/: the
// hexadecimal SHA-256 of the key, as for objects.
func blobName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// CreateBlob implements BlobStore. It streams r, through a buffer of 256
// KiB, into a temporary file in blobs/ (the file format: the key, the
// data, the data's length and a CRC-32C over all of it), fsyncs it, links
// it into place under the blob's name, which fails if the name exists
// (an error matching ErrConflict, the blob in place unchanged), removes
// the temporary name and fsyncs blobs/. The link is the one step that
// makes the blob appear, whole: no lock is needed. A failure of r or of
// the file system, or a done ctx, leaves no blob at key. A failure to make
// blobs/ durable once the blob is linked matches ErrOutcomeUnknown.
//
// While it writes, the temporary file is flocked, so that a store opened
// meanwhile (which removes temporary blob files that a crashed writer
// left) leaves it alone.
func (s *dirStore) CreateBlob(ctx context.Context, key string, r io.Reader) (BlobInfo, error) {
	if err := s.check(ctx, dirBlobCreate, key); err != nil {
		return BlobInfo{}, err
	}
	var r8 [8]byte
	if _, err := rand.Read(r8[:]); err != nil {
		return BlobInfo{}, storeErr(dirBlobCreate, key, nil, err)
	}
	tmpName := dirTempPrefix + hex.EncodeToString(r8[:])
	tmp, err := s.blobRoot.OpenFile(tmpName, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	linked := false
	defer func() {
		if !linked {
			s.blobRoot.Remove(tmpName)
		}
		tmp.Close() // drops the flock, once the temporary name is gone
	}()
	if _, err := dirTryLock(tmp); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	h := make([]byte, dirBlobHeaderSize, dirBlobHeaderSize+len(key))
	copy(h, dirBlobMagic)
	h[4] = dirBlobVersion
	binary.BigEndian.PutUint16(h[5:], uint16(len(key)))
	h = append(h, key...)
	crc := crc32.New(record.Castagnoli)
	crc.Write(h)
	if _, err := tmp.Write(h); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	var size int64
	buf := make([]byte, dirBlobBuffer)
	for {
		if err := ctx.Err(); err != nil {
			return BlobInfo{}, err
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			crc.Write(buf[:n])
			if _, err := tmp.Write(buf[:n]); err != nil {
				return BlobInfo{}, dirErr(dirBlobCreate, key, err)
			}
			size += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return BlobInfo{}, ctxErr
			}
			return BlobInfo{}, storeErr(dirBlobCreate, key, nil, rerr)
		}
	}
	tail := binary.BigEndian.AppendUint64(nil, uint64(size))
	crc.Write(tail)
	tail = binary.BigEndian.AppendUint32(tail, crc.Sum32())
	if _, err := tmp.Write(tail); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	if err := tmp.Sync(); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	st, err := tmp.Stat()
	if err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	if dirTestHooks.blobLink != nil {
		dirTestHooks.blobLink(s, key)
	}
	if err := ctx.Err(); err != nil {
		return BlobInfo{}, err
	}
	switch err := s.blobRoot.Link(tmpName, blobName(key)); {
	case errors.Is(err, fs.ErrExist):
		return BlobInfo{}, storeErr(dirBlobCreate, key, ErrConflict, err)
	case err != nil:
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	linked = true
	// The blob is in place: from here on a failure leaves it there, and
	// must not pass for a refusal (see replace).
	s.blobRoot.Remove(tmpName)
	if err := s.blobDir.Sync(); err != nil {
		return BlobInfo{}, storeErr(dirBlobCreate, key, ErrOutcomeUnknown, fmt.Errorf("the blob is in place but %s could not be synced: %v", esc(s.blobs), err))
	}
	return BlobInfo{Key: key, Size: size, Modified: st.ModTime()}, nil
}

// openBlob opens the blob file of key for op and checks what can be
// checked without reading its data: the header, the key, and the length
// the file ends with against the file's size. It returns the file, the
// blob's info, and the CRC-32C of the header and key.
func (s *dirStore) openBlob(ctx context.Context, op, key string) (*os.File, BlobInfo, uint32, error) {
	if err := s.check(ctx, op, key); err != nil {
		return nil, BlobInfo{}, 0, err
	}
	if s.blobRoot == nil {
		return nil, BlobInfo{}, 0, storeErr(op, key, ErrNotFound, nil) // a store written before it held blobs
	}
	f, err := s.blobRoot.Open(blobName(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, BlobInfo{}, 0, storeErr(op, key, ErrNotFound, nil)
	}
	if err != nil {
		return nil, BlobInfo{}, 0, dirErr(op, key, err)
	}
	info, sum, err := s.checkBlobFile(f, op, key)
	if err != nil {
		f.Close()
		return nil, BlobInfo{}, 0, err
	}
	return f, info, sum, nil
}

// checkBlobFile checks the blob file f of key (see openBlob).
func (s *dirStore) checkBlobFile(f *os.File, op, key string) (BlobInfo, uint32, error) {
	corrupt := func(check string) (BlobInfo, uint32, error) {
		return BlobInfo{}, 0, dirErr(op, key, &CorruptError{Key: key, Check: "dir store: blob " + check})
	}
	st, err := f.Stat()
	if err != nil {
		return BlobInfo{}, 0, dirErr(op, key, err)
	}
	h := make([]byte, dirBlobHeaderSize+len(key))
	switch _, err := f.ReadAt(h, 0); {
	case errors.Is(err, io.EOF):
		return corrupt("truncated file")
	case err != nil:
		return BlobInfo{}, 0, dirErr(op, key, err)
	case string(h[:4]) != dirBlobMagic:
		return corrupt("magic")
	case h[4] != dirBlobVersion:
		return corrupt("unknown format version")
	case int(binary.BigEndian.Uint16(h[5:])) != len(key) || string(h[dirBlobHeaderSize:]) != key:
		return corrupt("file holds another key")
	}
	size := st.Size() - int64(len(h)) - dirBlobTailSize
	if size < 0 {
		return corrupt("truncated file")
	}
	var n [8]byte
	if _, err := f.ReadAt(n[:], int64(len(h))+size); err != nil {
		return BlobInfo{}, 0, dirErr(op, key, err)
	}
	if binary.BigEndian.Uint64(n[:]) != uint64(size) {
		return corrupt("length disagrees with the file's size")
	}
	return BlobInfo{Key: key, Size: size, Modified: st.ModTime()}, crc32.Checksum(h, record.Castagnoli), nil
}

// OpenBlob implements BlobStore. The blob's header, key and length are
// checked when it is opened, a damaged one returning a *StoreError that
// wraps a *CorruptError; the reader checks the CRC-32C on the read that
// brings the data's last byte, and if the file was damaged returns such an
// error instead, with none of that read's bytes: the bytes read are good
// once the blob's size was read without an error. The
// reader reads the file it opened, even if the blob is deleted meanwhile.
func (s *dirStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, BlobInfo, error) {
	f, info, sum, err := s.openBlob(ctx, dirBlobOpen, key)
	if err != nil {
		return nil, BlobInfo{}, err
	}
	start := int64(dirBlobHeaderSize + len(key))
	return &dirBlobReader{
		f:    f,
		key:  key,
		data: io.NewSectionReader(f, start, info.Size),
		tail: start + info.Size,
		size: info.Size,
		sum:  sum,
	}, info, nil
}

// dirBlobReader reads a blob file's data and checks its CRC-32C at the
// end.
type dirBlobReader struct {
	f    *os.File
	key  string
	data *io.SectionReader
	tail int64  // the offset of the length that follows the data
	size int64  // the data's length
	read int64  // the data read so far
	sum  uint32 // the CRC-32C of what was read so far, header included
	err  error  // the verdict, once reached
}

func (b *dirBlobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.data.Read(p)
	b.sum = crc32.Update(b.sum, record.Castagnoli, p[:n])
	b.read += int64(n)
	if b.read == b.size && n > 0 {
		// The last byte: the checksum is checked before the read that
		// brings it returns, and a damaged file's bytes are withheld, so
		// a caller that reads exactly the size (io.ReadFull) sees the
		// damage too.
		if v := b.verdict(); v != io.EOF {
			b.err = v
			return 0, v
		}
		b.err = io.EOF
		return n, nil
	}
	switch {
	case err == nil:
		return n, nil
	case err != io.EOF:
		return n, dirErr(dirBlobRead, b.key, err)
	case b.read < b.size:
		// The file shrank since it was opened.
		b.err = dirErr(dirBlobRead, b.key, &CorruptError{Key: b.key, Check: "dir store: blob truncated file"})
	default:
		b.err = b.verdict()
	}
	return n, b.err
}

// verdict reads what follows the data and returns io.EOF if the CRC-32C
// it holds is the file's, else the error of a damaged file.
func (b *dirBlobReader) verdict() error {
	var tail [dirBlobTailSize]byte
	switch _, err := b.f.ReadAt(tail[:], b.tail); {
	case errors.Is(err, io.EOF):
		return dirErr(dirBlobRead, b.key, &CorruptError{Key: b.key, Check: "dir store: blob truncated file"})
	case err != nil:
		return dirErr(dirBlobRead, b.key, err)
	}
	if crc32.Update(b.sum, record.Castagnoli, tail[:8]) != binary.BigEndian.Uint32(tail[8:]) {
		return dirErr(dirBlobRead, b.key, &CorruptError{Key: b.key, Check: "dir store: blob checksum"})
	}
	return io.EOF
}

func (b *dirBlobReader) Close() error { return b.f.Close() }

// StatBlob implements BlobStore: the blob's size and modification time,
// with the checks OpenBlob makes before reading (the data itself is not
// read).
func (s *dirStore) StatBlob(ctx context.Context, key string) (BlobInfo, error) {
	f, info, _, err := s.openBlob(ctx, dirBlobStat, key)
	if err != nil {
		return BlobInfo{}, err
	}
	f.Close()
	return info, nil
}

// ListBlobs implements BlobStore. It reads the key held in each blob file,
// so it opens every blob file of the store, and calls fn in the order of
// the files' names; it reads no data, so a blob whose data or length is
// damaged is listed (with the size its file's length implies), to be
// found damaged by OpenBlob or StatBlob, or deleted. A file whose key
// cannot be read back, or that holds another key than its name's, cannot
// be named: the listing goes on, and ListBlobs then returns a
// *CorruptError for each such file, joined, as List does.
func (s *dirStore) ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.blobRoot == nil {
		return nil // a store written before it held blobs
	}
	entries, err := readRoot(s.blobRoot)
	if err != nil {
		return dirErr(dirBlobList, prefix, err)
	}
	damaged, err := scanFiles(ctx, entries, s.blobFileInfo, func(info BlobInfo) error {
		if !strings.HasPrefix(info.Key, prefix) {
			return nil
		}
		return fn(info)
	})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(damaged...)
}

// blobFileInfo returns the info of the blob file name: its key, read
// from the file and checked against the name, the size of the data the
// file's length implies, and its modification time. A file whose key
// cannot be read, or that sits under another name than its key's, returns
// a *CorruptError naming the file.
func (s *dirStore) blobFileInfo(name string) (BlobInfo, error) {
	f, err := s.blobRoot.Open(name)
	if err != nil {
		return BlobInfo{}, storeErr(dirBlobList, "", nil, err)
	}
	defer f.Close()
	key, err := readFileKey(f, dirBlobHeaderSize, dirBlobMagic, dirBlobVersion, 5)
	if err != nil {
		return BlobInfo{}, storeErr(dirBlobList, "", nil, err)
	}
	if key == nil || blobName(string(key)) != name {
		return BlobInfo{}, storeErr(dirBlobList, "", nil, &CorruptError{Check: "dir store: file blobs/" + name + " holds no readable key of its name"})
	}
	st, err := f.Stat()
	if err != nil {
		return BlobInfo{}, dirErr(dirBlobList, string(key), err)
	}
	size := max(0, st.Size()-int64(dirBlobHeaderSize+len(key))-dirBlobTailSize)
	return BlobInfo{Key: string(key), Size: size, Modified: st.ModTime()}, nil
}

// DeleteBlob implements BlobStore: it removes the blob's file and fsyncs
// blobs/. A reader that has the blob open goes on reading it.
func (s *dirStore) DeleteBlob(ctx context.Context, key string) error {
	if err := s.check(ctx, dirBlobDelete, key); err != nil {
		return err
	}
	if err := removeFile(s.blobRoot, s.blobDir, blobName(key)); err != nil {
		return dirErr(dirBlobDelete, key, err)
	}
	return nil
}
