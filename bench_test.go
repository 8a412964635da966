package writefence_test

import (
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"hash/fnv"
	"testing"

	"github.com/zeebo/blake3"
	"github.com/zeebo/xxh3"
)

// BenchmarkDigest measures, side by side, the candidates for the digest a
// record carries of its payload: the one pass over the payload that a push
// makes before (or while) it sends it. The record code takes only the
// standard library; BLAKE3 and XXH3 are measured as the best a dependency
// could give.
//
//	go test -run '^$' -bench '^BenchmarkDigest$' -benchmem -count 10 . | tee digest.txt
//	benchstat -col /digest digest.txt
func BenchmarkDigest(b *testing.B) {
	castagnoli, ecma := crc32.MakeTable(crc32.Castagnoli), crc64.MakeTable(crc64.ECMA)
	digests := []struct {
		name string
		sum  func([]byte)
	}{
		{"sha256", func(p []byte) { _ = sha256.Sum256(p) }},
		{"sha512-256", func(p []byte) { _ = sha512.Sum512_256(p) }},
		{"md5", func(p []byte) { _ = md5.Sum(p) }},
		{"crc32c", func(p []byte) { _ = crc32.Checksum(p, castagnoli) }},
		{"crc64", func(p []byte) { _ = crc64.Checksum(p, ecma) }},
		{"fnv128a", func(p []byte) { sum(fnv.New128a(), p) }},
		{"blake3", func(p []byte) { _ = blake3.Sum256(p) }},
		{"xxh3-128", func(p []byte) { _ = xxh3.Hash128(p) }},
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"16MiB", 16 << 20}} {
		payload := make([]byte, size.n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		for _, d := range digests {
			b.Run("size="+size.name+"/digest="+d.name, func(b *testing.B) {
				b.SetBytes(int64(size.n))
				b.ReportAllocs()
				for b.Loop() {
					d.sum(payload)
				}
			})
		}
	}
}

func sum(h hash.Hash, p []byte) {
	h.Write(p)
	_ = h.Sum(nil)
}
