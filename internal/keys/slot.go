package keys

import (
	"strconv"
	"sync"
)

// Slots of a Valkey (Redis) cluster. A cluster stores each key in one of
// Slots hash slots, the CRC-16 of the key (or of its hash tag) modulo
// Slots, and runs a transaction or a script only over keys of one slot.
// The keys writefence builds carry no hash tag of their own (escaping
// writes '{' and '}' as %7B and %7D), so a shard's record lives in the
// slot of its whole key and shards spread over the cluster; only a prefix
// holding a hash tag (such as "{app}/") puts every key in one slot. The
// keys a Valkey store adds beside a key in the same transaction, such as
// its replication sync key (WaitIn), are built with the tag of that key's
// slot (SlotTag), so they always share it.

// Slots is the number of hash slots of a cluster.
const Slots = 16384

// Slot returns the cluster hash slot of key, as the server computes it:
// the CRC-16 (XMODEM) of the key's hash tag, the bytes between its first
// '{' and the first '}' after it when there is at least one, else of the
// whole key, modulo Slots.
func Slot(key string) int {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return int(crc16(key) % Slots)
			}
		}
		break
	}
	return int(crc16(key) % Slots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	slotTagsOnce sync.Once
	slotTags     []string // slotTags[s] is the shortest tag found for slot s
)

// SlotTag returns a short string, without '{' or '}', whose slot is slot:
// a key that holds "{" + SlotTag(s) + "}" is in slot s. It panics when slot
// is not in [0, Slots). The table is built on first use (a few
// milliseconds): the first string of base-36 digits found for each slot,
// counting up from "0".
func SlotTag(slot int) string {
	slotTagsOnce.Do(func() {
		slotTags = make([]string, Slots)
		for n, left := uint64(0), Slots; left > 0; n++ {
			tag := strconv.FormatUint(n, 36)
			if s := crc16(tag) % Slots; slotTags[s] == "" {
				slotTags[s] = tag
				left--
			}
		}
	})
	return slotTags[slot]
}

// Staged is the key under which the Valkey store stages a value written
// with a new version token before a script moves it to key: in the
// reserved space of DefaultPrefix, tagged with key's slot, unique to the
// token.
func Staged(key, token string) string {
	return Staging + "{" + SlotTag(Slot(key)) + "}" + token
}

// Staging is what every key Staged returns starts with.
const Staging = DefaultPrefix + "_put/"

// WaitIn is the Valkey store's replication sync key for key on a cluster:
// Wait, tagged with the slot of key, so that it is in the same slot.
func WaitIn(key string) string {
	return Wait + "{" + SlotTag(Slot(key)) + "}"
}
