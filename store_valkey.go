package writefence

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence/internal/keys"
)

// The layout of a value: a digest, a version token, then the data.
const (
	// valkeyDigestLen is the length of the digest: the SHA-1 of the rest
	// of the value (token and data) in lower-case hex, the one hash a
	// server-side script can compute (redis.sha1hex).
	valkeyDigestLen = 40
	// valkeyVersionLen is the length of a version token: 128 random bits
	// in lower-case hex.
	valkeyVersionLen = 32
	// valkeyHeaderLen is what precedes the data.
	valkeyHeaderLen = valkeyDigestLen + valkeyVersionLen
)

// valkeyDamagedPrefix starts the version of a damaged value; the SHA-1 of
// the whole value as found follows it in lower-case hex. No token of an
// intact value has this form.
const valkeyDamagedPrefix = "damaged-"

// valkeyWaitKey is the key a read writes, with WaitReplicas set, so that
// its connection has a write ordered after what it read to WAIT for. It is
// in the reserved space of keys.DefaultPrefix, which no shard key reaches.
const valkeyWaitKey = keys.Wait

// valkeyDefaultWaitTimeout is the bound of a WAIT when WaitTimeout is zero.
const valkeyDefaultWaitTimeout = time.Second

// valkeyUnwatchTimeout bounds the UNWATCH sent after a transaction that did
// not reach EXEC, so a caller's cancelled ctx cannot leave a WATCH armed.
const valkeyUnwatchTimeout = 5 * time.Second

// ValkeyConditionalStore is a ConditionalStore over one standalone Valkey
// or Redis server (a primary, with replicas and failover when WaitReplicas
// is set; see Durability).
//
// Layout: each key holds a plain string: a 40-character lower-case hex
// digest, the 32-character lower-case hex version token, then the data.
// The digest is the SHA-1 of everything after it (token and data), so a
// value edited in place no longer matches it. The token is 128 bits from
// crypto/rand, drawn afresh for every write, so it never names two
// contents. Keep this layout in mind when looking at keys with valkey-cli:
//
//	GETRANGE <key> 0 39   # the digest
//	GETRANGE <key> 40 71  # the version token
//	GETRANGE <key> 72 -1  # the data
//	STRLEN <key>          # 72 + the size of the data
//
// A string layout, rather than a hash, lets Get bound its read on the
// server: one GETRANGE returns at most MaxObjectSize+73 bytes, however
// large the stored value is. A key holding another type is never read or
// overwritten: the server's WRONGTYPE error is returned wrapped, matching
// errors.ErrUnsupported and neither ErrNotFound nor ErrConflict.
//
// Damage in place: the version lives beside the bytes, so a value edited
// by hand (SETRANGE, APPEND, a SET by an operator or another program) keeps
// the token a fence may remember. Every read and every write therefore
// checks the value it finds against its digest. Get and GetPrefix report a
// value that fails as a *CorruptError (ErrCorrupt) whose Check says what
// failed and whose Version is "damaged-" followed by the SHA-1 of the whole
// value as found: it names exactly those bytes and no intact value. A
// PutIfVersion over such a value refuses with the same *CorruptError and
// writes nothing, whatever version it expects, except that version itself:
// then it replaces the damaged bytes if and only if they are still exactly
// those, decided in the write's atomic step. A current value larger than
// MaxObjectSize cannot be checked within the read limit: Get and
// PutIfVersion refuse it with an error matching ErrTooLarge.
//
// PutIfVersion is WATCH, read, MULTI, SET, EXEC on one dedicated
// connection, in two round trips; or, with Script set, one server-side Lua
// script that checks and sets in one round trip. Both give the same
// results and the same errors. The digest covers the whole value, and a
// server without scripting cannot hash, so the WATCH path reads the whole
// current value to check it and each write transfers the previous value
// too; the script hashes it on the server instead, which holds the
// single-threaded server meanwhile (7–8 ms per MiB on loopback, see
// BENCHMARKS.md, where the WATCH path was the faster of the two for a
// 16 MiB record: over a network the transfer costs what the script saves).
//
// Brand: PutIfBranded (BrandedPutter) reads the brand key inside the
// write's own atomic step, WATCHed with the data key and checked before
// MULTI/EXEC, or inside the script, so no write lands while the brand is
// foreign. The brand key must hold an intact value of this store, as a
// Brand over this store writes it.
//
// Durability: Valkey replicates asynchronously. A primary acknowledges a
// write before any replica has it, and loses it when a replica that lacks
// it is promoted; two pushes at one epoch can then both have returned nil.
// With WaitReplicas > 0 a write counts as landed only once WaitReplicas
// replicas acknowledged it: PutIfVersion follows its write with WAIT on the
// same connection and returns an error matching ErrOutcomeUnknown when
// fewer acknowledged within WaitTimeout (the write is on the primary and
// may or may not survive a failover). Reads are confirmed the same way,
// because a retried Fence.Push reports success when it reads a record that
// is exactly its own push: Get and GetPrefix write the key
// "writefence/_wait" in the same atomic step as their read and WAIT for
// that write, so the replicas that acknowledge it hold everything the read
// saw (the replication stream is ordered); when they cannot be confirmed
// they return an error matching ErrOutcomeUnknown, whatever they read. A
// retry therefore does not return nil until the replicas hold the record.
// Each WaitReplicas call costs one more round trip (the WAIT) and the
// replicas' acknowledgement time.
//
// What the caller must configure for failover (Sentinel or by hand): at
// least WaitReplicas replicas attached to the primary (with fewer, every
// call fails with ErrOutcomeUnknown), and a failover that promotes a
// replica holding every acknowledged write. WAIT counts any WaitReplicas
// replicas, so either set WaitReplicas to the number of replicas that can
// be promoted, or let failover pick the replica with the highest
// replication offset (Sentinel does, among replicas of equal
// replica-priority). A WAIT counts copies in the replicas' memory: losing
// the primary and those replicas at once loses the write unless they
// persist it. Without WaitReplicas only a single server without failover
// keeps the fence's guarantee, and then only as far as its own persistence
// (appendonly, appendfsync) does.
//
// Blobs: the store is no BlobStore, and Fence.PutBlob over it returns an
// error matching errors.ErrUnsupported. Valkey keeps every value in
// memory, caps a value at proto-max-bulk-len (512 MB by default) and takes
// a value whole, not streamed: keep blobs in an object store with
// Fence.Blobs and the manifests in Valkey.
//
// Errors: every failure that is not a verdict on what was found (a
// *CorruptError, a *WireError) is a *StoreError whose Op is "valkey get",
// "valkey put", "valkey wait", "valkey delete" or "valkey list"; Err
// reaches the client's error, when there is one. A refusal of the ACL
// (NOPERM, NOAUTH, WRONGPASS) also matches fs.ErrPermission, and a key of
// another type (WRONGTYPE) errors.ErrUnsupported: the command did nothing,
// and a Fence does not retry it. A WAIT refused after a write is not such
// a refusal: the write is on the primary, so it matches ErrOutcomeUnknown.
//
// Set the fields before first use; they are read without locking.
type ValkeyConditionalStore struct {
	// MaxObjectSize is the read limit in bytes, not counting the digest
	// and the version token; zero (or less) means the default, 64 MiB for
	// the largest default payload plus 4 KiB for a record header.
	MaxObjectSize int64

	// Script selects the one-round-trip path for PutIfVersion and
	// PutIfBranded: a Lua script run with EVALSHA, falling back to EVAL
	// (one more round trip) when the server's script cache does not hold
	// it. It also makes GetPrefix check the value on the server and
	// transfer only the prefix; without Script, GetPrefix reads and checks
	// the whole value as Get does. False means WATCH/MULTI/EXEC. Script
	// needs EVAL and EVALSHA to be allowed (ACL +@scripting).
	Script bool

	// WaitReplicas, when above zero, is the number of replicas that must
	// acknowledge a write before PutIfVersion reports it landed, and that
	// must confirm what Get and GetPrefix read before they return it; see
	// Durability. Fewer, or a failing WAIT, returns an error matching
	// ErrOutcomeUnknown. The ACL user then also needs WAIT, and SET on
	// "writefence/_wait". Zero (or less) means no WAIT.
	WaitReplicas int

	// WaitTimeout bounds each WAIT; zero (or less) means one second. It is
	// cut to ctx's deadline and rounded up to whole milliseconds (WAIT with
	// 0 would block for ever), so every call ends.
	WaitTimeout time.Duration

	client redis.UniversalClient

	standalone atomic.Bool // set once the server was found standalone
	checkMu    sync.Mutex  // serializes the check until it succeeds
}

var _ ConditionalStore = (*ValkeyConditionalStore)(nil)

var _ Capable = (*ValkeyConditionalStore)(nil)

// Capabilities implements Capable: the store's PrefixReader, PartsPutter
// and BrandedPutter are its own.
func (s *ValkeyConditionalStore) Capabilities() ConditionalStore { return s }

// NewValkeyConditionalStore returns a store that keeps its objects in the
// server client talks to, in the client's selected database. Keys are used
// as given; see ValkeyConditionalStore for what each holds.
//
// Server requirements: Valkey 7 or later, or Redis 6 or later, running
// standalone (a primary, optionally with replicas and failover, see
// Durability; *redis.Client and a failover client both work). Cluster
// mode is refused, because WATCH/MULTI/EXEC over keys in different cluster
// slots, or different shards, is not one atomic step: before the first key
// is read or written the store checks that the client is not a
// *redis.ClusterClient or *redis.Ring and that INFO cluster reports
// cluster_enabled:0, and until that holds every call returns, without
// touching a key, a *StoreError that matches errors.ErrUnsupported and
// says what was found. Retrying does not help: the configuration has to
// change. The check needs the INFO command (ACL +info); once it succeeds
// it is not repeated. The ACL user also needs EXISTS, GETRANGE, SET, DEL,
// WATCH, UNWATCH, MULTI and EXEC on the keys; EVAL and EVALSHA, and STRLEN
// and GET (which the scripts call), when Script is set; WAIT, and SET on
// "writefence/_wait", when WaitReplicas is set.
//
// Retries follow the client's options (MaxRetries). A script retried after
// its reply was lost recognises its own write and reports success; a
// transaction is never retried on another connection.
func NewValkeyConditionalStore(client redis.UniversalClient) *ValkeyConditionalStore {
	return &ValkeyConditionalStore{client: client}
}

func (s *ValkeyConditionalStore) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaultMaxObjectSize
}

// checkStandalone refuses a cluster before any key is touched; op and key
// are those of the call that asks. A success is remembered; a failure,
// transient or not, is checked afresh next time.
func (s *ValkeyConditionalStore) checkStandalone(ctx context.Context, op, key string) error {
	if s.standalone.Load() {
		return nil
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if s.standalone.Load() {
		return nil
	}
	unsupported := func(reason string) error {
		return storeErr("valkey "+op, key, errors.ErrUnsupported, errors.New("a standalone server is required: "+reason))
	}
	switch s.client.(type) {
	case *redis.ClusterClient:
		return unsupported("the client is a *redis.ClusterClient")
	case *redis.Ring:
		return unsupported("the client is a *redis.Ring, which shards keys across servers")
	}
	info, err := s.client.Info(ctx, "cluster").Result()
	if err != nil && !isContextErr(err) {
		err = fmt.Errorf("check server: %w", err)
	}
	if err != nil {
		return valkeyError(op, key, err)
	}
	enabled, ok := valkeyInfoField(info, "cluster_enabled")
	switch {
	case !ok:
		return unsupported("INFO cluster does not report cluster_enabled")
	case enabled != "0":
		return unsupported("INFO cluster reports cluster_enabled:" + esc(enabled))
	}
	s.standalone.Store(true)
	return nil
}

// valkeyInfoField returns the value of one "name:value" line of INFO output.
func valkeyInfoField(info, name string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == name {
			return v, true
		}
	}
	return "", false
}

// Get implements ConditionalStore. EXISTS and one bounded GETRANGE of the
// whole value run in one MULTI/EXEC, so the token and the bytes come from
// one atomic reply and a value over MaxObjectSize is refused having
// transferred at most one byte more than the limit. The value is checked
// against its digest on the client; see ValkeyConditionalStore for damage
// in place and for what WaitReplicas adds.
func (s *ValkeyConditionalStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	v, err := s.getChecked(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return []byte(v[valkeyHeaderLen:]), valkeyToken(v), nil
}

// getChecked reads the whole value at key and returns it as the server sent
// it, checked against its digest: the caller copies out only what it
// returns.
func (s *ValkeyConditionalStore) getChecked(ctx context.Context, key string) (string, error) {
	if err := s.checkStandalone(ctx, "get", key); err != nil {
		return "", err
	}
	limit := s.limit()
	var exists *redis.IntCmd
	var val *redis.StringCmd
	err := s.readAtomically(ctx, key, func(p redis.Pipeliner) []redis.Cmder {
		exists = p.Exists(ctx, key)
		val = p.GetRange(ctx, key, 0, valkeyReadEnd(limit))
		return []redis.Cmder{exists, val}
	})
	if err != nil {
		return "", err
	}
	if exists.Val() == 0 {
		return "", storeErr("valkey get", key, ErrNotFound, nil)
	}
	v := val.Val()
	if int64(len(v))-valkeyHeaderLen > limit {
		return "", tooLarge("valkey get", key, limit)
	}
	if check := valkeyCheck(v); check != "" {
		return "", &CorruptError{Key: key, Version: valkeyDamagedVersion(v), Check: check, Head: valkeyDamagedHead(v)}
	}
	return v, nil
}

// valkeyDamagedHead is the head of a damaged value's data, where the layout
// still places it: what follows the digest and the token, at most 4 KiB.
func valkeyDamagedHead(v string) []byte {
	if len(v) <= valkeyHeaderLen {
		return nil
	}
	return []byte(v[valkeyHeaderLen:min(len(v), valkeyHeaderLen+maxHeaderSize)])
}

// valkeyToken returns the version token of an intact value, copied: a
// caller keeps a version (a Fence caches it), and a substring would keep
// the whole value alive with it.
func valkeyToken(v string) string {
	return strings.Clone(v[valkeyDigestLen:valkeyHeaderLen])
}

// valkeyReadEnd is the last byte index a read of a value under limit asks
// GETRANGE for: one past the limit tells that the value is larger. Clamped
// so the sum cannot overflow.
func valkeyReadEnd(limit int64) int64 {
	if limit < math.MaxInt64-1-valkeyHeaderLen {
		return valkeyHeaderLen + limit
	}
	return math.MaxInt64 - 1
}

var _ PrefixReader = (*ValkeyConditionalStore)(nil)

// GetPrefix implements PrefixReader, with the same verdict as Get: a
// damaged value is a *CorruptError here too, however few bytes are asked
// for. With Script set a script checks the whole value on the server and
// returns the token, the size and the first n bytes of data, in one round
// trip (two with WaitReplicas), transferring no more than the prefix; it
// writes nothing (but the wait key, with WaitReplicas). Without Script the
// digest can only be checked on the client, so GetPrefix reads the whole
// value as Get does, and copies out only the prefix.
func (s *ValkeyConditionalStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", invalidArg("n", "%d, must be at least 1", n)
	}
	if !s.Script {
		v, err := s.getChecked(ctx, key)
		if err != nil {
			return nil, 0, "", err
		}
		data := v[valkeyHeaderLen:]
		return []byte(data[:min(int64(len(data)), n)]), int64(len(data)), valkeyToken(v), nil
	}
	if err := s.checkStandalone(ctx, "get", key); err != nil {
		return nil, 0, "", err
	}
	limit := s.limit()
	keys := []string{key}
	if s.WaitReplicas > 0 {
		keys = append(keys, valkeyWaitKey)
	}
	var res any
	err := s.dedicated(ctx, "get", key, func(conn redis.Scripter) (err error) {
		res, err = valkeyPrefixScript.Run(ctx, conn, keys, n, limit, maxHeaderSize).Result()
		if err != nil {
			return valkeyError("get", key, err)
		}
		return nil
	})
	if err != nil {
		return nil, 0, "", err
	}
	r, _ := res.([]any)
	if len(r) > 0 {
		switch what, _ := r[0].(string); {
		case what == "absent" && len(r) == 1:
			return nil, 0, "", storeErr("valkey get", key, ErrNotFound, nil)
		case what == "toolarge" && len(r) == 1:
			return nil, 0, "", tooLarge("valkey get", key, limit)
		case what == "corrupt" && len(r) == 4:
			check, _ := r[1].(string)
			version, _ := r[2].(string)
			ce := &CorruptError{Key: key, Version: version, Check: check}
			if head, _ := r[3].(string); head != "" {
				ce.Head = []byte(head)
			}
			return nil, 0, "", ce
		case what == "ok" && len(r) == 4:
			version, _ := r[1].(string)
			size, _ := r[2].(int64)
			prefix, _ := r[3].(string)
			return []byte(prefix), size, version, nil
		}
	}
	return nil, 0, "", valkeyUnexpected("get", key, res)
}

// valkeyCheckLua is valkeyCheck in Lua, shared by the scripts: the same
// checks in the same order, with the same names.
const valkeyCheckLua = `
local function check(v)
  if string.len(v) < 72 then return 'valkey value shorter than its header' end
  if not string.find(string.sub(v, 41, 72), '^[0-9a-f]+$') then return 'valkey version token' end
  if redis.sha1hex(string.sub(v, 41)) ~= string.sub(v, 1, 40) then return 'valkey value digest' end
  return false
end
`

// valkeyPrefixScript is GetPrefix with Script set. STRLEN comes first so a
// key of another type fails with WRONGTYPE, and the size is known before
// the value is loaded, as Get refuses a value over the limit before
// checking it.
//
// KEYS[1]: the data key; KEYS[2], when given, the wait key, written so the
// caller can WAIT for what was read. ARGV[1]: the prefix length. ARGV[2]:
// the read limit. ARGV[3]: how much of a damaged value's data to return.
// Returns {"absent"}, {"toolarge"}, {"corrupt", check, damaged version,
// head of the data} or {"ok", token, size of data, prefix of data}.
var valkeyPrefixScript = redis.NewScript(valkeyCheckLua + `
local size = redis.call('STRLEN', KEYS[1])
local exists = size > 0 or redis.call('EXISTS', KEYS[1]) == 1
if KEYS[2] then redis.call('SET', KEYS[2], '') end
if not exists then return {'absent'} end
if size - 72 > tonumber(ARGV[2]) then return {'toolarge'} end
local v = redis.call('GET', KEYS[1])
local c = check(v)
if c then return {'corrupt', c, 'damaged-' .. redis.sha1hex(v), string.sub(v, 73, 72 + tonumber(ARGV[3]))} end
return {'ok', string.sub(v, 41, 72), size - 72, string.sub(v, 73, 72 + tonumber(ARGV[1]))}
`)

// readAtomically runs the reads queue adds in one MULTI/EXEC and returns
// the first error among them. With WaitReplicas set it also writes
// valkeyWaitKey inside that MULTI/EXEC and WAITs for it on the same
// connection: the replication stream is ordered, so the replicas that
// acknowledge the write hold everything the reads saw. A WAIT on a
// connection that wrote nothing after its read would prove nothing.
func (s *ValkeyConditionalStore) readAtomically(ctx context.Context, key string, queue func(redis.Pipeliner) []redis.Cmder) error {
	read := func(c redis.Pipeliner, wait bool) error {
		var cmds []redis.Cmder
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmds = queue(p)
			if wait {
				p.Set(ctx, valkeyWaitKey, "", 0)
			}
			return nil
		})
		if err != nil {
			return valkeyError("get", key, valkeyQueuedError(err, cmds...))
		}
		return nil
	}
	if s.WaitReplicas <= 0 {
		return read(s.client.TxPipeline(), false)
	}
	return s.client.Watch(ctx, func(tx *redis.Tx) error {
		if err := read(tx.TxPipeline(), true); err != nil {
			return err
		}
		return s.wait(ctx, tx, "get", key)
	})
}

// dedicated runs f on a connection of its own and, with WaitReplicas set,
// WAITs on that connection after f succeeded.
func (s *ValkeyConditionalStore) dedicated(ctx context.Context, op, key string, f func(redis.Scripter) error) error {
	return s.client.Watch(ctx, func(tx *redis.Tx) error {
		if err := f(tx); err != nil {
			return err
		}
		if s.WaitReplicas > 0 {
			return s.wait(ctx, tx, op, key)
		}
		return nil
	})
}

// wait WAITs on conn until WaitReplicas replicas acknowledged every write
// made on it, for at most WaitTimeout (cut to ctx's deadline, and at least
// one millisecond: WAIT 0 blocks for ever). op is the caller's, "get" or
// "put". Fewer, or a WAIT that fails, is a *StoreError of op "valkey
// wait" matching ErrOutcomeUnknown; a cancelled or expired ctx passes
// through untouched (after a write, its outcome is as unknown as after any
// other failure).
func (s *ValkeyConditionalStore) wait(ctx context.Context, conn *redis.Tx, op, key string) error {
	timeout := s.WaitTimeout
	if timeout <= 0 {
		timeout = valkeyDefaultWaitTimeout
	}
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	timeout = max((timeout + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
	n, err := conn.Wait(ctx, s.WaitReplicas, timeout).Result()
	if isContextErr(err) {
		return err
	}
	if err != nil {
		return storeErr("valkey wait", key, ErrOutcomeUnknown, err)
	}
	if n < int64(s.WaitReplicas) {
		what := "the write"
		if op == "get" {
			what = "what was read"
		}
		return storeErr("valkey wait", key, ErrOutcomeUnknown,
			fmt.Errorf("%d of %d replicas acknowledged %s within %v", n, s.WaitReplicas, what, timeout))
	}
	return nil
}

var _ Deleter = (*ValkeyConditionalStore)(nil)

// Delete implements Deleter.
func (s *ValkeyConditionalStore) Delete(ctx context.Context, key string) error {
	if err := s.checkStandalone(ctx, "delete", key); err != nil {
		return err
	}
	if err := s.client.Del(ctx, key).Err(); err != nil {
		return valkeyError("delete", key, err)
	}
	return nil
}

// valkeyListCount is the COUNT hint of each SCAN step of List.
const valkeyListCount = 512

var _ Lister = (*ValkeyConditionalStore)(nil)

// List implements Lister with SCAN MATCH over the selected database. SCAN
// may return a key more than once; List calls fn once per key. Keys are
// returned in no particular order.
func (s *ValkeyConditionalStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	if err := s.checkStandalone(ctx, "list", prefix); err != nil {
		return err
	}
	var pattern strings.Builder
	for _, c := range []byte(prefix) {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			pattern.WriteByte('\\')
		}
		pattern.WriteByte(c)
	}
	pattern.WriteByte('*')
	seen := make(map[string]struct{})
	var cursor uint64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, pattern.String(), valkeyListCount).Result()
		if err != nil {
			return valkeyError("list", prefix, err)
		}
		for _, k := range keys {
			if _, dup := seen[k]; dup || !strings.HasPrefix(k, prefix) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			seen[k] = struct{}{}
			if err := fn(k); err != nil {
				return err
			}
		}
		if next == 0 {
			return ctx.Err()
		}
		cursor = next
	}
}

// newValkeyVersion draws a fresh version token.
func newValkeyVersion() string {
	var b [valkeyVersionLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand aborts the program instead
	return hex.EncodeToString(b[:])
}

// valkeyValue lays out a value: the digest, the token, the data (the parts
// joined).
func valkeyValue(version string, parts [][]byte) []byte {
	size := valkeyHeaderLen
	for _, p := range parts {
		size += len(p)
	}
	value := make([]byte, valkeyHeaderLen, size)
	copy(value[valkeyDigestLen:], version)
	for _, p := range parts {
		value = append(value, p...)
	}
	sum := sha1.Sum(value[valkeyDigestLen:])
	hex.Encode(value[:valkeyDigestLen], sum[:])
	return value
}

// valkeyCheck returns the check a stored value fails, or "" when it is an
// intact value of this store. valkeyCheckLua repeats it on the server.
func valkeyCheck(v string) string {
	switch {
	case len(v) < valkeyHeaderLen:
		return "valkey value shorter than its header"
	case !validValkeyVersion(v[valkeyDigestLen:valkeyHeaderLen]):
		return "valkey version token"
	}
	sum := valkeySHA1(v[valkeyDigestLen:])
	var digest [valkeyDigestLen]byte
	hex.Encode(digest[:], sum[:])
	if string(digest[:]) != v[:valkeyDigestLen] {
		return "valkey value digest"
	}
	return ""
}

// valkeySHA1 is the SHA-1 of s. A value comes from the client as a string;
// hashing it through a small buffer spares a copy of the whole value.
func valkeySHA1(s string) [sha1.Size]byte {
	h := sha1.New()
	var buf [8 << 10]byte
	for len(s) > 0 {
		n := copy(buf[:], s)
		h.Write(buf[:n])
		s = s[n:]
	}
	var sum [sha1.Size]byte
	h.Sum(sum[:0])
	return sum
}

// valkeyDamagedVersion is the version of a value that fails valkeyCheck:
// it names exactly those bytes.
func valkeyDamagedVersion(v string) string {
	sum := valkeySHA1(v)
	return valkeyDamagedPrefix + hex.EncodeToString(sum[:])
}

// validValkeyVersion reports whether v has the form of a version token.
func validValkeyVersion(v string) bool {
	return len(v) == valkeyVersionLen && isLowerHex(v)
}

// validValkeyDamagedVersion reports whether v has the form of the version
// of a damaged value.
func validValkeyDamagedVersion(v string) bool {
	h, ok := strings.CutPrefix(v, valkeyDamagedPrefix)
	return ok && len(h) == 2*sha1.Size && isLowerHex(h)
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// valkeyQueuedError returns, for a transaction the server discarded
// (EXECABORT), the error of the first command it refused while queueing,
// such as NOPERM, which says why; otherwise err.
func valkeyQueuedError(err error, cmds ...redis.Cmder) error {
	if !redis.IsExecAbortError(err) {
		return err
	}
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && !redis.IsExecAbortError(cerr) {
			return cerr
		}
	}
	return err
}

// valkeyError wraps a client or server error, such as WRONGTYPE, NOPERM or
// a transport failure, in a *StoreError of op "valkey "+op whose Err
// reaches it. It never matches ErrConflict or ErrNotFound; a cancelled or
// expired ctx passes through untouched. go-redis's errors name the
// server's address at most, never the password.
//
// Two kinds of refusal are final, because the server will answer the same
// again: the ACL's refusals (NOPERM, NOAUTH, WRONGPASS) match
// fs.ErrPermission, and a key holding another type than a string
// (WRONGTYPE), which the store never reads or overwrites, matches
// errors.ErrUnsupported. A command refused so did nothing.
func valkeyError(op, key string, err error) error {
	return valkeyErrorAbout(op, key, "the key", err)
}

// valkeyErrorAbout is valkeyError where what names the key or keys a
// WRONGTYPE is about: "the key", or the brand key.
func valkeyErrorAbout(op, key, what string, err error) error {
	if isContextErr(err) {
		return err
	}
	switch valkeyErrorCode(err) {
	case "NOPERM", "NOAUTH", "WRONGPASS":
		return storeErr("valkey "+op, key, fs.ErrPermission, err)
	case "WRONGTYPE":
		return &StoreError{Op: "valkey " + op, Key: key,
			Err: fmt.Errorf("%s holds a value of another type: %w: %w", what, errors.ErrUnsupported, err)}
	}
	return storeErr("valkey "+op, key, nil, err)
}

// valkeyErrorCode returns the code of the server's error reply err
// reaches, its first word (WRONGTYPE, NOPERM...); "" when err reaches none.
// The server keeps the code of an error raised inside a script.
func valkeyErrorCode(err error) string {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return ""
	}
	code, _, _ := strings.Cut(reply.Error(), " ")
	return code
}

// valkeyUnexpected reports a script reply of no form the script returns.
func valkeyUnexpected(op, key string, res any) error {
	return storeErr("valkey "+op, key, nil, errors.New("unexpected script reply "+esc(fmt.Sprint(res))))
}
