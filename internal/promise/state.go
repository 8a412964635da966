package promise

import (
	"bytes"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// replica is the store as the history's changes built it: the contents of
// the keys that hold records, leases, the brand and settle logs, and the
// blobs.
type replica struct {
	values map[string]*value // present keys; an absent key has none

	blobs  map[string]*blob            // every blob key that ever existed
	spaces map[string]map[string]*blob // the blobs that exist, by blob space

	lastChange  map[string]int // per key, the index of its last change
	lastOutside map[string]int // per key, the index of its last outside change

	// refs indexes the references of the records' sound contents: per
	// blob key, the record keys whose content references it.
	refs map[string]map[string]bool
}

func newReplica() replica {
	return replica{
		values:      map[string]*value{},
		blobs:       map[string]*blob{},
		spaces:      map[string]map[string]*blob{},
		lastChange:  map[string]int{},
		lastOutside: map[string]int{},
		refs:        map[string]map[string]bool{},
	}
}

// set stores v (nil: absent) at key.
func (r *replica) set(idx int, key string, v *value, outside bool) {
	if v == nil {
		delete(r.values, key)
	} else {
		r.values[key] = v
	}
	r.touch(idx, key, outside)
}

func (r *replica) touch(idx int, key string, outside bool) {
	r.lastChange[key] = idx
	if outside {
		r.lastOutside[key] = idx
	}
}

// changedOutsideSince reports whether something outside the package
// changed key after the entry at idx.
func (r *replica) changedOutsideSince(key string, idx int) bool {
	at, ok := r.lastOutside[key]
	return ok && at > idx
}

// changedSince reports whether key changed after the entry at idx.
func (r *replica) changedSince(key string, idx int) bool {
	at, ok := r.lastChange[key]
	return ok && at > idx
}

// create stores a new blob.
func (r *replica) create(idx int, ch *Change, outside bool) *blob {
	b := &blob{key: ch.Key, data: bytes.Clone(ch.Data), modified: ch.Modified, exists: true, call: ch.Call}
	r.blobs[ch.Key] = b
	space := spaceOfBlob(ch.Key)
	if r.spaces[space] == nil {
		r.spaces[space] = map[string]*blob{}
	}
	r.spaces[space][ch.Key] = b
	r.touch(idx, ch.Key, outside)
	return b
}

// deleteBlob removes a blob, remembering that it existed.
func (r *replica) deleteBlob(idx int, key string, outside bool) {
	if b := r.blobs[key]; b != nil {
		b.exists = false
	}
	space := spaceOfBlob(key)
	delete(r.spaces[space], key)
	if len(r.spaces[space]) == 0 {
		delete(r.spaces, space)
	}
	r.touch(idx, key, outside)
}

// spaceOfBlob is the blob space a blob key is in: a blob's name holds no
// '/', so it is everything up to the last one.
func spaceOfBlob(key string) string { return key[:strings.LastIndexByte(key, '/')+1] }

// value is one content a key held, as one put stored it.
type value struct {
	data    []byte
	version string
	at      int  // the index of the change that stored it
	call    int  // the call it was made for; 0 outside
	inPlace bool // an outside change that damaged the bytes without a new version

	rec *decoded // decoded as a record, once asked
}

func newValue(idx int, ch *Change) *value {
	return &value{data: bytes.Clone(ch.Data), version: ch.Version, at: idx, call: ch.Call, inPlace: ch.InPlace}
}

// decoded is a value decoded as a record.
type decoded struct {
	h     record.Header
	body  record.Body
	check string // the failed check; "" when sound

	// Of a damaged record: its header, when that still decodes.
	head   record.Header
	headOK bool
}

// record decodes v as a record, once.
func (v *value) record() *decoded {
	if v.rec == nil {
		d := &decoded{}
		d.h, d.body, d.check = record.Decode(v.data)
		if d.check != "" {
			d.h, d.body = record.Header{}, record.Body{}
			h, check := record.DecodeHeader(v.data)
			d.head, d.headOK = h, check == ""
		}
		v.rec = d
	}
	return v.rec
}

// sound reports whether v is present and decodes as a record.
func (v *value) sound() bool { return v != nil && v.record().check == "" }

// damaged reports whether v is present and does not decode as a record.
func (v *value) damaged() bool { return v != nil && v.record().check != "" }

// header is the header of what v holds, sound or damaged, and false when
// v is absent or not even its header decodes.
func (v *value) header() (record.Header, bool) {
	switch {
	case v == nil:
		return record.Header{}, false
	case v.sound():
		return v.rec.h, true
	}
	return v.rec.head, v.rec.headOK
}

// refsOf is what v references, and false when that cannot be known: a
// sound record's references, or those a damaged one's still salvage.
func refsOf(v *value) ([]record.BlobRef, bool) {
	switch {
	case v == nil:
		return nil, true
	case v.sound():
		return v.rec.body.Refs, true
	}
	return record.SalvageRefs(v.data)
}

// blob is one blob key of the store.
type blob struct {
	key      string
	data     []byte
	modified time.Time
	exists   bool
	call     int // the call that created it; 0 outside

	deletedOutside bool // last deleted by something outside the package
	collectedBy    int  // the Collect call that deleted it; 0 for none
}

// prefixKeys are the key spaces under one prefix.
type prefixKeys struct {
	prefix  string
	brand   string // the brand key
	lease   string // what every lease key starts with
	settled string // what every settle log's key starts with
	floor   string // what every floor key starts with
}

// learnPrefix adds a prefix whose keys the Checker classifies. An invalid
// prefix is not learned: it may reach into another's keys, and the
// package writes nothing under it (promise 28 judges its calls).
func (c *Checker) learnPrefix(p string) {
	if p == "" {
		p = keys.DefaultPrefix
	}
	if _, ok := c.prefixes[p]; ok || keys.CheckPrefix(p) != nil {
		return
	}
	pk := prefixKeys{prefix: p, brand: keys.Brand(p)}
	if k, err := keys.Lease(p, "x"); err == nil {
		pk.lease = strings.TrimSuffix(k, "x")
	}
	if k, err := keys.SettleLog(p, "x", "y"); err == nil {
		pk.settled = strings.TrimSuffix(k, "x/y")
	}
	pk.floor = keys.Floors(p)
	c.prefixes[p] = pk
}

// The classes of keys whose writes the promises judge.
const (
	classNone      = ""
	classRecord    = "record"
	classLease     = "lease"
	classBrand     = "brand"
	classSettleLog = "settle log"
	classFloor     = "floor"
)

// classify names the class of key and the prefix it is under. Valid
// prefixes never reach into each other's keys (keys.CheckPrefix), so at
// most one prefix claims a key.
func (c *Checker) classify(key string) (class, prefix string) {
	for p, pk := range c.prefixes {
		if !strings.HasPrefix(key, p) {
			continue
		}
		switch {
		case key == pk.brand:
			return classBrand, p
		case pk.lease != "" && strings.HasPrefix(key, pk.lease):
			return classLease, p
		case pk.settled != "" && strings.HasPrefix(key, pk.settled):
			return classSettleLog, p
		case strings.HasPrefix(key, pk.floor):
			return classFloor, p
		}
		if _, _, ok := keys.ParseShard(p, key); ok {
			return classRecord, p
		}
	}
	return classNone, ""
}

// shardKey is a record key and the shard it names.
type shardKey struct {
	key, prefix, plugin, shard string
}

func (c *Checker) shardOf(key, prefix string) (shardKey, bool) {
	plugin, shard, ok := keys.ParseShard(prefix, key)
	return shardKey{key: key, prefix: prefix, plugin: plugin, shard: shard}, ok
}

// blob is the key of the blob name of k's shard.
func (k shardKey) blob(name string) (string, bool) {
	b, err := keys.Blob(k.prefix, k.plugin, k.shard, name)
	return b, err == nil
}

// callShard is the shard of a call on one: its Plugin and Shard, or
// those its Key names.
func (c *Checker) callShard(call *Call) (shardKey, bool) {
	p := prefixOf(call)
	if call.Plugin != "" && call.Shard != "" {
		k, err := keys.Shard(p, call.Plugin, call.Shard)
		return shardKey{key: k, prefix: p, plugin: call.Plugin, shard: call.Shard}, err == nil
	}
	if call.Key == "" {
		return shardKey{}, false
	}
	return c.shardOf(call.Key, p)
}

// spaceOf is the blob space of a call's shard.
func (c *Checker) spaceOf(call *Call) (string, bool) {
	k, ok := c.callShard(call)
	if !ok {
		return "", false
	}
	space, err := keys.Blobs(k.prefix, k.plugin, k.shard)
	return space, err == nil
}

// blobKeyOf is the key of the blob name of a call's shard.
func (c *Checker) blobKeyOf(call *Call, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	k, ok := c.callShard(call)
	if !ok {
		return "", false
	}
	return k.blob(name)
}

// indexRefs moves the reference index of record key k from its content
// old to v.
func (c *Checker) indexRefs(k shardKey, old, v *value) {
	if old.sound() {
		for _, r := range old.rec.body.Refs {
			if b, ok := k.blob(r.Name); ok {
				delete(c.st.refs[b], k.key)
				if len(c.st.refs[b]) == 0 {
					delete(c.st.refs, b)
				}
			}
		}
	}
	if v.sound() {
		for _, r := range v.rec.body.Refs {
			if b, ok := k.blob(r.Name); ok {
				if c.st.refs[b] == nil {
					c.st.refs[b] = map[string]bool{}
				}
				c.st.refs[b][k.key] = true
			}
		}
	}
}

// refsEqual compares references in order, an empty list equal to none.
func refsEqual(a, b []record.BlobRef) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// added returns the references of next that prev does not hold.
func added(prev, next []record.BlobRef) []record.BlobRef {
	var out []record.BlobRef
	for _, r := range next {
		found := false
		for _, p := range prev {
			if p == r {
				found = true
				break
			}
		}
		if !found {
			out = append(out, r)
		}
	}
	return out
}
