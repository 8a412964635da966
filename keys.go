package writefence

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/keys"
)

// The keys a Fence reads and writes are built in internal/keys: a shard's
// record at Prefix + "s/" + plugin + "/" + shard (names escaped, so the
// mapping is injective), the reserved keys (brand, leases, probe) at
// Prefix + "_" + name, so that no shard key is ever a reserved key.

// shardKey returns the key of (plugin, shard) under prefix; a rejected name
// is an *InvalidArgumentError.
func shardKey(prefix, plugin, shard string) (string, error) {
	k, err := keys.Shard(prefix, plugin, shard)
	return k, keyErr(err)
}

// keyErr turns a key limit's refusal into an *InvalidArgumentError.
func keyErr(err error) error {
	var ke *keys.Error
	if errors.As(err, &ke) {
		return &InvalidArgumentError{Arg: ke.Arg, Reason: ke.Reason}
	}
	return err
}

// Shard names a shard for Hold to seal.
type Shard struct {
	Plugin, Shard string
}

// blobIDs makes the ids of a Fence's blobs; it holds the last one.
type blobIDs struct {
	mu   sync.Mutex
	ms   uint64
	rand [10]byte
}

// next returns a blob's id: the Unix time of now in milliseconds, in 12
// hexadecimal digits, then 80 random bits in 20, the last id's plus one
// where its time is not before now's (as a ULID's monotonic mode has it).
// The blob names of an epoch so sort in the order one Fence put them, and
// in about that order across Fences, which lets a commit list only its
// writer's latest blobs (see listAhead); the order is never relied on for
// anything but the cost of a listing.
func (b *blobIDs) next(now time.Time) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ms := idMillis(now); ms > b.ms {
		if _, err := rand.Read(b.rand[:]); err != nil {
			return "", fmt.Errorf("writefence: blob id: %w", err)
		}
		b.ms = ms
	} else {
		i := len(b.rand) - 1
		for ; i >= 0; i-- {
			if b.rand[i]++; b.rand[i] != 0 {
				break
			}
		}
		if i < 0 { // 2^80 ids in one millisecond: the next one's
			b.ms++
		}
	}
	return fmt.Sprintf("%012x%x", b.ms, b.rand), nil
}

// latest returns the time part of the greatest id next could have made by
// now: now's, or the last id's where the clock stepped back.
func (b *blobIDs) latest(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%012x", max(idMillis(now), b.ms))
}

// idMillis is the time part of an id made at now: its Unix milliseconds,
// in the 48 bits of 12 hexadecimal digits.
func idMillis(now time.Time) uint64 { return uint64(now.UnixMilli()) & (1<<48 - 1) }
