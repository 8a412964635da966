package keys

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSlot checks Slot against slots the servers computed (CLUSTER KEYSLOT
// on Valkey 8.0.1), hash tags included.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                     0,
		"123456789":            12739, // the CRC-16/XMODEM check value 0x31C3
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363, // an empty tag: the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"foo{bar}{zap}":        5061, // the first tag only
		"writefence/_wait{x}":  Slot("x"),
		"tenant{1}/s/wal/0":    Slot("1"),
	} {
		assert.Equal(t, want, Slot(key), "%q", key)
	}
}

// TestSlotTag checks that every slot has a tag, that the tag names the
// slot, and that WaitIn shares its key's slot.
func TestSlotTag(t *testing.T) {
	for s := range Slots {
		tag := SlotTag(s)
		if !assert.NotEmpty(t, tag, "slot %d", s) {
			continue
		}
		assert.NotContains(t, tag, "{")
		assert.NotContains(t, tag, "}")
		assert.Equal(t, s, Slot("x{"+tag+"}y"), "slot %d tag %q", s, tag)
	}
	for _, key := range []string{"writefence/s/wal/0", "a", "tenant{1}/s/wal/0", "{", "}{"} {
		assert.Equal(t, Slot(key), Slot(WaitIn(key)), "%q", key)
		assert.Equal(t, Slot(key), Slot(Staged(key, "0123456789abcdef0123456789abcdef")), "%q", key)
	}
}
