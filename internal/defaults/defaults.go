// Package defaults holds the values writefence uses when a setting is left
// at its zero value, so the library and its command state them once.
package defaults

// Identity is the record-level wire identity a Fence writes and expects
// when none is configured. It names the package's record format.
const Identity = "writefence/v1"

// MaxPayloadSize is the largest payload a Fence accepts when none is
// configured.
const MaxPayloadSize = 64 << 20

// MaxHeaderSize bounds a record's header: the room a store's read limit
// must leave above the largest payload.
const MaxHeaderSize = 4 << 10

// MaxObjectSize is the read limit of the package's stores when none is
// configured: the largest default payload plus room for a header.
const MaxObjectSize = MaxPayloadSize + MaxHeaderSize
