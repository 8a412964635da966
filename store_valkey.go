package writefence

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
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
// neither ErrNotFound nor ErrConflict.
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
// results and the same errors. The WATCH path reads the whole current
// value to check its digest, so each write transfers the previous value
// too; the script hashes it on the server instead, which holds the
// single-threaded server meanwhile (7–8 ms per MiB on loopback, see
// BENCHMARKS.md, where the WATCH path was the faster of the two for a
// 16 MiB record: over a network the transfer costs what the script saves).
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
// Set the fields before first use; they are read without locking.
type ValkeyConditionalStore struct {
	// MaxObjectSize is the read limit in bytes, not counting the digest
	// and the version token; zero (or less) means defaultMaxObjectSize.
	MaxObjectSize int64

	// Script selects the one-round-trip path for PutIfVersion: a Lua script
	// run with EVALSHA, falling back to EVAL (one more round trip) when the
	// server's script cache does not hold it. It also makes GetPrefix check
	// the value on the server and transfer only the prefix; without Script,
	// GetPrefix reads and checks the whole value as Get does. False means
	// WATCH/MULTI/EXEC. Script needs EVAL and EVALSHA to be allowed (ACL
	// +@scripting).
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

	// BrandKey, when set, makes every write depend on the store's brand
	// (see Brand): PutIfVersion to any other key reads BrandKey inside the
	// write's own atomic step (WATCHed with the data key and checked before
	// MULTI/EXEC, or inside the script), and writes only if it holds
	// BrandIdentity. An absent brand or another value refuses with a
	// *WireError (ErrWire) and writes nothing; a brand changed between the
	// check and EXEC aborts the write with ErrConflict, and the retry sees
	// the new brand. So no write lands while the brand is foreign, which a
	// check before the write (Fence.BrandCheck) cannot promise. Writes to
	// BrandKey itself are not checked, so a Brand over this store can claim
	// or install it. A brand key of another type (WRONGTYPE), one the ACL
	// user may not read (NOPERM) or one that is not an intact value of
	// this store fails the write with that error, never with ErrWire or
	// ErrNotFound. Empty means no brand check.
	BrandKey string

	// BrandIdentity is the identity BrandKey must hold; empty means
	// defaultIdentity.
	BrandIdentity string

	client redis.UniversalClient

	standalone atomic.Bool // set once the server was found standalone
	checkMu    sync.Mutex  // serializes the check until it succeeds
}

var (
	_ ConditionalStore = (*ValkeyConditionalStore)(nil)
	_ Deleter          = (*ValkeyConditionalStore)(nil)
	_ PrefixReader     = (*ValkeyConditionalStore)(nil)
)

// NewValkeyConditionalStore returns a store that keeps its objects in the
// server client talks to, in the client's selected database. Keys are used
// as given; see ValkeyConditionalStore for what each holds.
//
// Server requirements: Valkey 7 or later, or Redis 6 or later, running
// standalone (a primary, optionally with replicas and failover, see
// Durability; *redis.Client and a failover client both work). Cluster mode is refused: before the
// first key is read or written the store checks that the client is not a
// *redis.ClusterClient or *redis.Ring and that INFO cluster reports
// cluster_enabled:0, and until that holds every call returns a
// *ValkeyUnsupportedError without touching a key. The check needs the INFO
// command (ACL +info); once it succeeds it is not repeated. The ACL user
// also needs EXISTS, GETRANGE, SET, DEL, WATCH, UNWATCH, MULTI and EXEC on
// the keys; EVAL and EVALSHA, and STRLEN and GET (which the scripts call),
// when Script is set; WAIT, and SET on "writefence/_wait", when
// WaitReplicas is set.
//
// Retries follow the client's options (MaxRetries). A script retried after
// its reply was lost recognises its own write and reports success; a
// transaction is never retried on another connection.
func NewValkeyConditionalStore(client redis.UniversalClient) *ValkeyConditionalStore {
	return &ValkeyConditionalStore{client: client}
}

// ValkeyUnsupportedError reports that a ValkeyConditionalStore refused the
// server or the client it was given, before reading or writing any key: the
// store serves standalone servers only, because WATCH/MULTI/EXEC over keys
// in different cluster slots, or different shards, is not one atomic step.
// Test for it with errors.As. Retrying does not help: the configuration has
// to change.
type ValkeyUnsupportedError struct {
	Reason string // what was found, e.g. "INFO cluster reports cluster_enabled:1"
}

func (e *ValkeyUnsupportedError) Error() string {
	return "writefence: valkey: a standalone server is required: " + e.Reason
}

func (s *ValkeyConditionalStore) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaultMaxObjectSize
}

// checkStandalone refuses a cluster before any key is touched. A success is
// remembered; a failure, transient or not, is checked afresh next time.
func (s *ValkeyConditionalStore) checkStandalone(ctx context.Context) error {
	if s.standalone.Load() {
		return nil
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if s.standalone.Load() {
		return nil
	}
	switch s.client.(type) {
	case *redis.ClusterClient:
		return &ValkeyUnsupportedError{Reason: "the client is a *redis.ClusterClient"}
	case *redis.Ring:
		return &ValkeyUnsupportedError{Reason: "the client is a *redis.Ring, which shards keys across servers"}
	}
	info, err := s.client.Info(ctx, "cluster").Result()
	if err != nil {
		return valkeyError("check server", "", err)
	}
	enabled, ok := valkeyInfoField(info, "cluster_enabled")
	switch {
	case !ok:
		return &ValkeyUnsupportedError{Reason: "INFO cluster does not report cluster_enabled"}
	case enabled != "0":
		return &ValkeyUnsupportedError{Reason: "INFO cluster reports cluster_enabled:" + esc(enabled)}
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
	if err := s.checkStandalone(ctx); err != nil {
		return nil, "", err
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
		return nil, "", err
	}
	if exists.Val() == 0 {
		return nil, "", &valkeyWrapped{op: "get", key: key, kind: ErrNotFound}
	}
	v := []byte(val.Val())
	if int64(len(v))-valkeyHeaderLen > limit {
		return nil, "", tooLarge("valkey get", key, limit)
	}
	if check := valkeyCheck(v); check != "" {
		return nil, "", &CorruptError{Key: key, Version: valkeyDamagedVersion(v), Check: check}
	}
	return v[valkeyHeaderLen:], string(v[valkeyDigestLen:valkeyHeaderLen]), nil
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

// GetPrefix implements PrefixReader, with the same verdict as Get: a
// damaged value is a *CorruptError here too, however few bytes are asked
// for. With Script set a script checks the whole value on the server and
// returns the token, the size and the first n bytes of data, in one round
// trip (two with WaitReplicas), transferring no more than the prefix; it
// writes nothing (but the wait key, with WaitReplicas). Without Script the digest can only be checked on the client, so
// GetPrefix reads the whole value as Get does and cuts it.
func (s *ValkeyConditionalStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", invalidArg("n", "%d, must be at least 1", n)
	}
	if !s.Script {
		data, version, err := s.Get(ctx, key)
		if err != nil {
			return nil, 0, "", err
		}
		return data[:min(int64(len(data)), n)], int64(len(data)), version, nil
	}
	if err := s.checkStandalone(ctx); err != nil {
		return nil, 0, "", err
	}
	limit := s.limit()
	keys := []string{key}
	if s.WaitReplicas > 0 {
		keys = append(keys, valkeyWaitKey)
	}
	var res any
	err := s.dedicated(ctx, "get", key, func(conn redis.Scripter) (err error) {
		res, err = valkeyPrefixScript.Run(ctx, conn, keys, n, limit).Result()
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
			return nil, 0, "", &valkeyWrapped{op: "get", key: key, kind: ErrNotFound}
		case what == "toolarge" && len(r) == 1:
			return nil, 0, "", tooLarge("valkey get", key, limit)
		case what == "corrupt" && len(r) == 3:
			check, _ := r[1].(string)
			version, _ := r[2].(string)
			return nil, 0, "", &CorruptError{Key: key, Version: version, Check: check}
		case what == "ok" && len(r) == 4:
			version, _ := r[1].(string)
			size, _ := r[2].(int64)
			prefix, _ := r[3].(string)
			return []byte(prefix), size, version, nil
		}
	}
	return nil, 0, "", fmt.Errorf("writefence: valkey get %s: unexpected script reply %s", esc(key), esc(fmt.Sprint(res)))
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
// the read limit. Returns {"absent"}, {"toolarge"}, {"corrupt", check,
// damaged version} or {"ok", token, size of data, prefix of data}.
var valkeyPrefixScript = redis.NewScript(valkeyCheckLua + `
local size = redis.call('STRLEN', KEYS[1])
local exists = redis.call('EXISTS', KEYS[1]) == 1
if KEYS[2] then redis.call('SET', KEYS[2], '') end
if not exists then return {'absent'} end
if size - 72 > tonumber(ARGV[2]) then return {'toolarge'} end
local v = redis.call('GET', KEYS[1])
local c = check(v)
if c then return {'corrupt', c, 'damaged-' .. redis.sha1hex(v)} end
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
// one millisecond: WAIT 0 blocks for ever). Fewer, or a WAIT that fails,
// is an error matching ErrOutcomeUnknown; a cancelled or expired ctx
// passes through untouched (after a write, its outcome is as unknown as
// after any other failure).
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
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if err != nil {
		return &valkeyWrapped{op: op, key: key, kind: ErrOutcomeUnknown, err: err}
	}
	if n < int64(s.WaitReplicas) {
		what := "the write"
		if op == "get" {
			what = "what was read"
		}
		return &valkeyWrapped{op: op, key: key, kind: ErrOutcomeUnknown,
			err: fmt.Errorf("%d of %d replicas acknowledged %s within %v", n, s.WaitReplicas, what, timeout)}
	}
	return nil
}

// PutIfVersion implements ConditionalStore. A non-empty expectVersion that
// is not a version of this store's forms (a token, or the version of a
// damaged value) cannot equal the current version, so it returns an error
// matching ErrConflict without a round trip.
func (s *ValkeyConditionalStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.putIfVersion(ctx, key, data, expectVersion, nil)
}

// valkeyBrand is the brand a write depends on; the zero value means none.
type valkeyBrand struct{ key, identity string }

// brandFor returns the brand a write to key must check.
func (s *ValkeyConditionalStore) brandFor(key string) valkeyBrand {
	if s.BrandKey == "" || key == s.BrandKey {
		return valkeyBrand{}
	}
	return valkeyBrand{key: s.BrandKey, identity: orDefault(s.BrandIdentity, defaultIdentity)}
}

// guard is the brand check as a guard of the WATCH path.
func (b valkeyBrand) guard() valkeyGuard {
	return valkeyGuard{key: b.key, check: func(value []byte, exists bool) error {
		return compareBrand(b.key, b.identity, value, exists)
	}}
}

// putIfVersion is PutIfVersion with guards, which only the WATCH path takes.
func (s *ValkeyConditionalStore) putIfVersion(ctx context.Context, key string, data []byte, expectVersion string, guards []valkeyGuard) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if expectVersion != "" && !validValkeyVersion(expectVersion) && !validValkeyDamagedVersion(expectVersion) {
		return "", &valkeyWrapped{op: "put", key: key, kind: ErrConflict,
			err: fmt.Errorf("%s is not a version this store issues", esc(expectVersion))}
	}
	if err := s.checkStandalone(ctx); err != nil {
		return "", err
	}
	version := newValkeyVersion()
	value := valkeyValue(version, data)
	brand := s.brandFor(key)
	var err error
	if s.Script && len(guards) == 0 {
		err = s.putScript(ctx, key, value, expectVersion, brand)
	} else {
		if brand.key != "" {
			guards = append(guards[:len(guards):len(guards)], brand.guard())
		}
		err = s.putWatch(ctx, key, value, expectVersion, guards)
	}
	if err != nil {
		return "", err
	}
	return version, nil
}

// valkeyGuard is a further key a write depends on: PutIfVersion WATCHes it
// with the data key, reads it in the same round trip and calls check on what
// it holds: the value's data, cut at valkeyGuardLimit+1 bytes. A non-nil
// error from check refuses the write and is returned as is; a change to the
// key before EXEC aborts the write with ErrConflict. A guard key that
// exists, was read whole and is not an intact value of this store (see
// valkeyCheck) fails the write before check is called; one longer than the
// read is passed on cut, without its digest checked.
type valkeyGuard struct {
	key   string
	check func(value []byte, exists bool) error
}

// valkeyGuardLimit bounds what a guard reads of its key's data.
const valkeyGuardLimit = maxHeaderSize

// putWatch is the WATCH path: round trip one is WATCH on key and every guard
// followed by the reads, pipelined; round trip two is MULTI, SET, EXEC;
// with WaitReplicas set, round trip three is WAIT. Everything runs on one
// dedicated connection. Whenever EXEC did not run, an UNWATCH is sent
// before the connection goes back to the pool, so no WATCH outlives the
// call; a connection in an unknown state (a transport error, a cancelled
// ctx) is closed by the client instead of pooled.
func (s *ValkeyConditionalStore) putWatch(ctx context.Context, key string, value []byte, expectVersion string, guards []valkeyGuard) error {
	// No keys here: the WATCH travels in the first pipeline below, so
	// Client.Watch does not cost a round trip of its own. It does not know
	// about that WATCH, hence the explicit UNWATCH.
	return s.client.Watch(ctx, func(tx *redis.Tx) error {
		watched := []any{"watch", key}
		for _, g := range guards {
			watched = append(watched, g.key)
		}
		execRan := false
		defer func() {
			if !execRan {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), valkeyUnwatchTimeout)
				defer cancel()
				// On a broken connection this fails without I/O and the
				// connection is discarded, which drops the WATCH too.
				_ = tx.Unwatch(uctx).Err()
			}
		}()

		limit := s.limit()
		var exists *redis.IntCmd
		var current *redis.StringCmd
		guardExists := make([]*redis.IntCmd, len(guards))
		guardVals := make([]*redis.StringCmd, len(guards))
		_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, redis.NewStatusCmd(ctx, watched...))
			exists = p.Exists(ctx, key)
			current = p.GetRange(ctx, key, 0, valkeyReadEnd(limit))
			for i, g := range guards {
				guardExists[i] = p.Exists(ctx, g.key)
				guardVals[i] = p.GetRange(ctx, g.key, 0, valkeyHeaderLen+valkeyGuardLimit)
			}
			return nil
		})
		if err != nil {
			return valkeyError("put", key, err)
		}
		cur := []byte(current.Val())
		if exists.Val() != 0 && int64(len(cur))-valkeyHeaderLen > limit {
			return tooLarge("valkey put", key, limit)
		}
		for i, g := range guards {
			v, exists := []byte(guardVals[i].Val()), guardExists[i].Val() != 0
			if exists {
				if len(v) <= valkeyHeaderLen+valkeyGuardLimit {
					if check := valkeyCheck(v); check != "" {
						return errNotValkeyValue("put", key, g.key, check)
					}
				}
				v = v[valkeyHeaderLen:]
			}
			if err := g.check(v, exists); err != nil {
				return err
			}
		}
		if exists.Val() != 0 {
			if check := valkeyCheck(cur); check != "" {
				if damaged := valkeyDamagedVersion(cur); expectVersion != damaged {
					return &CorruptError{Key: key, Version: damaged, Check: check}
				}
			} else if !valkeyVersionMatches(true, string(cur[valkeyDigestLen:valkeyHeaderLen]), expectVersion) {
				return &valkeyWrapped{op: "put", key: key, kind: ErrConflict}
			}
		} else if !valkeyVersionMatches(false, "", expectVersion) {
			return &valkeyWrapped{op: "put", key: key, kind: ErrConflict}
		}

		// The client would send the write on a cancelled ctx: refuse here,
		// so a cancelled call writes nothing.
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, value, 0)
			return nil
		})
		// EXEC discards the WATCH whether it commits or aborts; an EXECABORT
		// (a command refused while queued) discards it too.
		if err == nil || errors.Is(err, redis.TxFailedErr) || redis.IsExecAbortError(err) {
			execRan = true
		}
		if errors.Is(err, redis.TxFailedErr) {
			return &valkeyWrapped{op: "put", key: key, kind: ErrConflict, err: err}
		}
		if err != nil {
			return valkeyError("put", key, err)
		}
		if s.WaitReplicas > 0 {
			return s.wait(ctx, tx, "put", key)
		}
		return nil
	})
}

// valkeyVersionMatches is the precondition over an intact value or none,
// shared by both paths (the script repeats it in Lua): absent when
// expectVersion is empty, else present with exactly that token.
func valkeyVersionMatches(exists bool, current, expectVersion string) bool {
	if expectVersion == "" {
		return !exists
	}
	return exists && current == expectVersion
}

// valkeyPutScript is the one-round-trip check-and-set, in the order of the
// WATCH path: the size, the brand, then the precondition. STRLEN comes
// first so a key of another type fails with WRONGTYPE, as on the WATCH
// path. A current value equal to the new one can only be this very write
// (its token is new), applied by an earlier attempt whose reply was lost:
// it reports success, so a retried script never turns its own write into a
// conflict, even when the brand changed since it landed (it was admitted
// under the right brand); it writes the wait key so that a WAIT after it
// has a write of this connection to wait for.
//
// KEYS[1]: the data key; KEYS[2]: the wait key; KEYS[3], when given, the
// brand key. ARGV[1]: the expected version, "" for absent. ARGV[2]: the new
// value. ARGV[3]: the identity the brand key must hold. ARGV[4]: the last
// byte index of the brand key to read. ARGV[5]: the read limit. ARGV[6]:
// "1" when the caller will WAIT. Returns 1 when written, 0 on a failed
// precondition, {"toolarge"}, {"corrupt", check, damaged version}, or a
// brand refusal: {"absent"}, {"layout", check} for a value that is not an
// intact value of this store, or {"found", data}.
var valkeyPutScript = redis.NewScript(valkeyCheckLua + `
local size = redis.call('STRLEN', KEYS[1])
local exists = redis.call('EXISTS', KEYS[1]) == 1
local current, damaged
if exists then
  if size - 72 > tonumber(ARGV[5]) then return {'toolarge'} end
  local v = redis.call('GET', KEYS[1])
  if v == ARGV[2] then
    if ARGV[6] == '1' then redis.call('SET', KEYS[2], '') end
    return 1
  end
  local c = check(v)
  if c then
    damaged = {'corrupt', c, 'damaged-' .. redis.sha1hex(v)}
  else
    current = string.sub(v, 41, 72)
  end
end
if KEYS[3] then
  local brand = redis.call('GETRANGE', KEYS[3], 0, tonumber(ARGV[4]))
  if redis.call('EXISTS', KEYS[3]) == 0 then
    return {'absent'}
  end
  if string.len(brand) <= tonumber(ARGV[4]) then
    local c = check(brand)
    if c then return {'layout', c} end
  end
  if string.sub(brand, 73) ~= ARGV[3] then
    return {'found', string.sub(brand, 73)}
  end
end
if damaged then
  if ARGV[1] ~= damaged[3] then return damaged end
elseif ARGV[1] == '' then
  if exists then return 0 end
elseif not exists or current ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// putScript is the Script path, with a WAIT after it when WaitReplicas is
// set, on the same connection.
func (s *ValkeyConditionalStore) putScript(ctx context.Context, key string, value []byte, expectVersion string, brand valkeyBrand) error {
	keys := []string{key, valkeyWaitKey}
	if brand.key != "" {
		keys = append(keys, brand.key)
	}
	wait := "0"
	if s.WaitReplicas > 0 {
		wait = "1"
	}
	limit := s.limit()
	var res any
	// The script runs on a connection of its own: go-redis retries a
	// command whose reply was lost on another pooled connection, and a
	// re-sent script that finds a rival's write after its own would
	// report a conflict for a write that landed. A dedicated connection
	// fails the retry instead, so the error stays ambiguous, as it is. The
	// WAIT must run on that connection too, after a write of its own.
	err := s.client.Watch(ctx, func(tx *redis.Tx) error {
		var err error
		res, err = valkeyPutScript.Run(ctx, tx, keys, expectVersion, value,
			brand.identity, valkeyHeaderLen+valkeyGuardLimit, limit, wait).Result()
		if err != nil {
			return valkeyError("put", key, err)
		}
		if r, ok := res.(int64); ok && r == 1 && s.WaitReplicas > 0 {
			return s.wait(ctx, tx, "put", key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch r := res.(type) {
	case int64:
		if r != 1 {
			return &valkeyWrapped{op: "put", key: key, kind: ErrConflict}
		}
		return nil
	case []any:
		if len(r) == 0 {
			break
		}
		switch what, _ := r[0].(string); {
		case what == "toolarge" && len(r) == 1:
			return tooLarge("valkey put", key, limit)
		case what == "corrupt" && len(r) == 3:
			check, _ := r[1].(string)
			version, _ := r[2].(string)
			return &CorruptError{Key: key, Version: version, Check: check}
		case brand.key == "":
		case what == "absent":
			return compareBrand(brand.key, brand.identity, nil, false)
		case what == "layout" && len(r) == 2:
			check, _ := r[1].(string)
			return errNotValkeyValue("put", key, brand.key, check)
		case what == "found" && len(r) == 2:
			found, _ := r[1].(string)
			return compareBrand(brand.key, brand.identity, []byte(found), true)
		}
	}
	return fmt.Errorf("writefence: valkey put %s: unexpected script reply %s", esc(key), esc(fmt.Sprint(res)))
}

// errNotValkeyValue reports a further key a write depends on that exists
// but is not an intact value of this store.
func errNotValkeyValue(op, key, other, check string) error {
	return fmt.Errorf("writefence: valkey %s %s: %s is not an intact value of this store: %s", op, esc(key), esc(other), check)
}

// Delete implements Deleter.
func (s *ValkeyConditionalStore) Delete(ctx context.Context, key string) error {
	if err := s.checkStandalone(ctx); err != nil {
		return err
	}
	if err := s.client.Del(ctx, key).Err(); err != nil {
		return valkeyError("delete", key, err)
	}
	return nil
}

// newValkeyVersion draws a fresh version token.
func newValkeyVersion() string {
	var b [valkeyVersionLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand aborts the program instead
	return hex.EncodeToString(b[:])
}

// valkeyValue lays out a value: the digest, the token, the data.
func valkeyValue(version string, data []byte) []byte {
	value := make([]byte, valkeyHeaderLen+len(data))
	copy(value[valkeyDigestLen:], version)
	copy(value[valkeyHeaderLen:], data)
	sum := sha1.Sum(value[valkeyDigestLen:])
	hex.Encode(value[:valkeyDigestLen], sum[:])
	return value
}

// valkeyCheck returns the check a stored value fails, or "" when it is an
// intact value of this store. valkeyCheckLua repeats it on the server.
func valkeyCheck(v []byte) string {
	switch {
	case len(v) < valkeyHeaderLen:
		return "valkey value shorter than its header"
	case !validValkeyVersion(string(v[valkeyDigestLen:valkeyHeaderLen])):
		return "valkey version token"
	}
	sum := sha1.Sum(v[valkeyDigestLen:])
	var digest [valkeyDigestLen]byte
	hex.Encode(digest[:], sum[:])
	if string(digest[:]) != string(v[:valkeyDigestLen]) {
		return "valkey value digest"
	}
	return ""
}

// valkeyDamagedVersion is the version of a value that fails valkeyCheck:
// it names exactly those bytes.
func valkeyDamagedVersion(v []byte) string {
	sum := sha1.Sum(v)
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

// valkeyWrapped carries a failure with its context. Unwrap reaches both the
// package's sentinel, when there is one, and the client's own error.
type valkeyWrapped struct {
	op, key string
	kind    error // ErrConflict, ErrNotFound or nil
	err     error // the client's error; nil when the outcome is the whole story
}

func (e *valkeyWrapped) Error() string {
	s := "writefence: valkey " + e.op
	if e.key != "" {
		s += " " + esc(e.key)
	}
	if e.kind != nil {
		s += ": " + strings.TrimPrefix(e.kind.Error(), "writefence: ")
	}
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *valkeyWrapped) Unwrap() []error {
	var errs []error
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.err != nil {
		errs = append(errs, e.err)
	}
	return errs
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

// valkeyError wraps a client or server error, such as WRONGTYPE, NOPERM or a
// transport failure. It never matches ErrConflict or ErrNotFound; a
// cancelled or expired ctx passes through untouched. go-redis's errors name
// the server's address at most, never the password.
func valkeyError(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &valkeyWrapped{op: op, key: key, err: err}
}

var _ Lister = (*ValkeyConditionalStore)(nil)

// valkeyListCount is the COUNT hint of each SCAN step of List.
const valkeyListCount = 512

// List implements Lister with SCAN MATCH over the selected database. SCAN
// may return a key more than once; List calls fn once per key. Keys are
// returned in no particular order.
func (s *ValkeyConditionalStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	if err := s.checkStandalone(ctx); err != nil {
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
			seen[k] = struct{}{}
			if err := fn(k); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
