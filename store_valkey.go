package writefence

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// valkeyVersionLen is the length of a version token: 128 random bits in
// lower-case hex.
const valkeyVersionLen = 32

// valkeyUnwatchTimeout bounds the UNWATCH sent after a transaction that did
// not reach EXEC, so a caller's cancelled ctx cannot leave a WATCH armed.
const valkeyUnwatchTimeout = 5 * time.Second

// ValkeyConditionalStore is a ConditionalStore over one standalone Valkey
// or Redis server (or a primary with Sentinel failover).
//
// Layout: each key holds a plain string, the 32-character lower-case hex
// version token followed directly by the data. The token is 128 bits from
// crypto/rand, drawn afresh for every write, so it never names two contents.
// Keep this layout in mind when looking at keys with valkey-cli:
//
//	GETRANGE <key> 0 31   # the version token
//	GETRANGE <key> 32 -1  # the data
//	STRLEN <key>          # 32 + the size of the data
//
// A string layout, rather than a hash, lets Get bound its read on the
// server: one GETRANGE returns at most MaxObjectSize+33 bytes, however large
// the stored value is. A key holding another type is never read or
// overwritten: the server's WRONGTYPE error is returned wrapped, matching
// neither ErrNotFound nor ErrConflict.
//
// PutIfVersion is WATCH, read, MULTI, SET, EXEC on one dedicated connection,
// in two round trips; or, with Script set, one server-side Lua script that
// compares and sets in one round trip. Both give the same results and the
// same errors.
//
// Set the fields before first use; they are read without locking.
type ValkeyConditionalStore struct {
	// MaxObjectSize is the read limit of Get in bytes, not counting the
	// version token; zero (or less) means DefaultMaxObjectSize.
	MaxObjectSize int64

	// Script selects the one-round-trip path for PutIfVersion: a Lua script
	// run with EVALSHA, falling back to EVAL (one more round trip) when the
	// server's script cache does not hold it. False means WATCH/MULTI/EXEC.
	// Script needs EVAL and EVALSHA to be allowed (ACL +@scripting).
	Script bool

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
	// user may not read (NOPERM) or one not in this store's layout fails
	// the write with that error, never with ErrWire or ErrNotFound. Empty
	// means no brand check.
	BrandKey string

	// BrandIdentity is the identity BrandKey must hold; empty means
	// DefaultIdentity.
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
// standalone (a primary, optionally with Sentinel failover; *redis.Client
// and a failover client both work). Cluster mode is refused: before the
// first key is read or written the store checks that the client is not a
// *redis.ClusterClient or *redis.Ring and that INFO cluster reports
// cluster_enabled:0, and until that holds every call returns a
// *ValkeyUnsupportedError without touching a key. The check needs the INFO
// command (ACL +info); once it succeeds it is not repeated. The ACL user
// also needs EXISTS, GETRANGE, SET, DEL, WATCH, UNWATCH, MULTI and EXEC on
// the keys, and EVAL and EVALSHA when Script is set.
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
	return DefaultMaxObjectSize
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
		return &ValkeyUnsupportedError{Reason: "INFO cluster reports cluster_enabled:" + Escape(enabled)}
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

// Get implements ConditionalStore. EXISTS and one bounded GETRANGE run in one
// MULTI/EXEC, so the token and the bytes come from one atomic reply and a
// value over MaxObjectSize is refused having transferred at most one byte
// more than the limit.
func (s *ValkeyConditionalStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := s.checkStandalone(ctx); err != nil {
		return nil, "", err
	}
	limit := s.limit()
	// The last byte index GETRANGE may return: one past the limit tells
	// that the value is larger. Clamped so the sum cannot overflow.
	end := int64(math.MaxInt64 - 1)
	if limit < end-valkeyVersionLen {
		end = valkeyVersionLen + limit
	}
	var exists *redis.IntCmd
	var val *redis.StringCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, key)
		val = p.GetRange(ctx, key, 0, end)
		return nil
	})
	if err != nil {
		return nil, "", valkeyError("get", key, valkeyQueuedError(err, exists, val))
	}
	if exists.Val() == 0 {
		return nil, "", &valkeyWrapped{op: "get", key: key, kind: ErrNotFound}
	}
	v := val.Val()
	if int64(len(v))-valkeyVersionLen > limit {
		return nil, "", &TooLargeError{Key: key, Limit: limit}
	}
	if len(v) < valkeyVersionLen || !validValkeyVersion(v[:valkeyVersionLen]) {
		return nil, "", fmt.Errorf("writefence: valkey get %s: the value does not start with a version token: not written by this store", Escape(key))
	}
	return []byte(v[valkeyVersionLen:]), v[:valkeyVersionLen], nil
}

// GetPrefix implements PrefixReader. EXISTS, STRLEN and one GETRANGE of the
// token and the first n bytes of data run in one MULTI/EXEC, so the prefix,
// the size and the token come from one atomic reply, in one round trip. As
// Get, it refuses a value larger than the read limit, here having read no
// more than the prefix.
func (s *ValkeyConditionalStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", invalidArg("n", "%d, must be at least 1", n)
	}
	if err := s.checkStandalone(ctx); err != nil {
		return nil, 0, "", err
	}
	end := int64(math.MaxInt64 - 1)
	if n < end-valkeyVersionLen {
		end = valkeyVersionLen + n - 1
	}
	var exists, length *redis.IntCmd
	var val *redis.StringCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, key)
		length = p.StrLen(ctx, key)
		val = p.GetRange(ctx, key, 0, end)
		return nil
	})
	if err != nil {
		return nil, 0, "", valkeyError("get", key, valkeyQueuedError(err, exists, length, val))
	}
	if exists.Val() == 0 {
		return nil, 0, "", &valkeyWrapped{op: "get", key: key, kind: ErrNotFound}
	}
	v := val.Val()
	if len(v) < valkeyVersionLen || !validValkeyVersion(v[:valkeyVersionLen]) {
		return nil, 0, "", fmt.Errorf("writefence: valkey get %s: the value does not start with a version token: not written by this store", Escape(key))
	}
	size := length.Val() - valkeyVersionLen
	if limit := s.limit(); size > limit {
		return nil, 0, "", &TooLargeError{Key: key, Limit: limit}
	}
	return []byte(v[valkeyVersionLen:]), size, v[:valkeyVersionLen], nil
}

// PutIfVersion implements ConditionalStore. A non-empty expectVersion that
// is not a token of this store's form cannot equal the current version, so
// it returns an error matching ErrConflict without a round trip.
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
	return valkeyBrand{key: s.BrandKey, identity: orDefault(s.BrandIdentity, DefaultIdentity)}
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
	if expectVersion != "" && !validValkeyVersion(expectVersion) {
		return "", &valkeyWrapped{op: "put", key: key, kind: ErrConflict,
			err: fmt.Errorf("%s is not a version this store issues", Escape(expectVersion))}
	}
	if err := s.checkStandalone(ctx); err != nil {
		return "", err
	}
	version := newValkeyVersion()
	value := make([]byte, 0, len(version)+len(data))
	value = append(append(value, version...), data...)
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
// it holds: the value after its first 32 bytes (the token, in the store's
// layout), cut at valkeyGuardLimit bytes. A non-nil error from check refuses
// the write and is returned as is; a change to the key before EXEC aborts
// the write with ErrConflict. A guard key that exists but does not start
// with a version token fails the write before check is called.
type valkeyGuard struct {
	key   string
	check func(value []byte, exists bool) error
}

// valkeyGuardLimit bounds what a guard reads of its key.
const valkeyGuardLimit = MaxHeaderSize

// putWatch is the WATCH path: round trip one is WATCH on key and every guard
// followed by the reads, pipelined; round trip two is MULTI, SET, EXEC.
// Everything runs on one dedicated connection. Whenever EXEC did not run,
// an UNWATCH is sent before the connection goes back to the pool, so no
// WATCH outlives the call; a connection in an unknown state (a transport
// error, a cancelled ctx) is closed by the client instead of pooled.
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

		var exists *redis.IntCmd
		var current *redis.StringCmd
		guardExists := make([]*redis.IntCmd, len(guards))
		guardVals := make([]*redis.StringCmd, len(guards))
		_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, redis.NewStatusCmd(ctx, watched...))
			exists = p.Exists(ctx, key)
			current = p.GetRange(ctx, key, 0, valkeyVersionLen-1)
			for i, g := range guards {
				guardExists[i] = p.Exists(ctx, g.key)
				guardVals[i] = p.GetRange(ctx, g.key, 0, valkeyVersionLen+valkeyGuardLimit-1)
			}
			return nil
		})
		if err != nil {
			return valkeyError("put", key, err)
		}
		for i, g := range guards {
			v, exists := guardVals[i].Val(), guardExists[i].Val() != 0
			if exists {
				if len(v) < valkeyVersionLen || !validValkeyVersion(v[:valkeyVersionLen]) {
					return errNotValkeyLayout("put", key, g.key)
				}
				v = v[valkeyVersionLen:]
			}
			if err := g.check([]byte(v), exists); err != nil {
				return err
			}
		}
		if !valkeyVersionMatches(exists.Val() != 0, current.Val(), expectVersion) {
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
		return nil
	})
}

// valkeyVersionMatches is the precondition, shared by both paths (the script
// repeats it in Lua): absent when expectVersion is empty, else present with
// exactly that token.
func valkeyVersionMatches(exists bool, current, expectVersion string) bool {
	if expectVersion == "" {
		return !exists
	}
	return exists && current == expectVersion
}

// valkeyPutScript is the one-round-trip check-and-set. GETRANGE comes first
// so a key of another type fails with WRONGTYPE, as on the WATCH path. A
// current token equal to the new one can only be this very write, applied
// by an earlier attempt whose reply was lost: it reports success, so a
// retried script never turns its own write into a conflict, even when the
// brand changed since it landed (it was admitted under the right brand).
//
// KEYS[1]: the data key; KEYS[2], when given, the brand key. ARGV[1]: the
// expected version, "" for absent. ARGV[2]: the new value, version token
// then data. ARGV[3]: the identity the brand key must hold. ARGV[4]: the
// last byte index of the brand key to read. Returns 1 when written, 0 on a
// failed precondition, or a brand refusal: {"absent"}, {"layout"} for a
// value without a version token, or {"found", value}.
var valkeyPutScript = redis.NewScript(`
local current = redis.call('GETRANGE', KEYS[1], 0, 31)
local exists = redis.call('EXISTS', KEYS[1]) == 1
if exists and current == string.sub(ARGV[2], 1, 32) then
  return 1
end
if KEYS[2] then
  local brand = redis.call('GETRANGE', KEYS[2], 0, tonumber(ARGV[4]))
  if redis.call('EXISTS', KEYS[2]) == 0 then
    return {'absent'}
  end
  if string.len(brand) < 32 or not string.find(string.sub(brand, 1, 32), '^[0-9a-f]+$') then
    return {'layout'}
  end
  if string.sub(brand, 33) ~= ARGV[3] then
    return {'found', string.sub(brand, 33)}
  end
end
if ARGV[1] == '' then
  if exists then return 0 end
elseif not exists or current ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`)

// putScript is the Script path.
func (s *ValkeyConditionalStore) putScript(ctx context.Context, key string, value []byte, expectVersion string, brand valkeyBrand) error {
	keys := []string{key}
	if brand.key != "" {
		keys = append(keys, brand.key)
	}
	// The script runs on a connection of its own: go-redis retries a
	// command whose reply was lost on another pooled connection, and a
	// re-sent script that finds a rival's write after its own would
	// report a conflict for a write that landed. A dedicated connection
	// fails the retry instead, so the error stays ambiguous, as it is.
	var runner redis.Scripter = s.client
	if c, ok := s.client.(*redis.Client); ok {
		conn := c.Conn()
		defer conn.Close()
		runner = conn
	}
	res, err := valkeyPutScript.Run(ctx, runner, keys, expectVersion, value,
		brand.identity, valkeyVersionLen+valkeyGuardLimit-1).Result()
	if err != nil {
		return valkeyError("put", key, err)
	}
	switch r := res.(type) {
	case int64:
		if r != 1 {
			return &valkeyWrapped{op: "put", key: key, kind: ErrConflict}
		}
		return nil
	case []any:
		if len(r) > 0 && brand.key != "" {
			switch what, _ := r[0].(string); what {
			case "absent":
				return compareBrand(brand.key, brand.identity, nil, false)
			case "layout":
				return errNotValkeyLayout("put", key, brand.key)
			case "found":
				if len(r) == 2 {
					found, _ := r[1].(string)
					return compareBrand(brand.key, brand.identity, []byte(found), true)
				}
			}
		}
	}
	return fmt.Errorf("writefence: valkey put %s: unexpected script reply %s", Escape(key), Escape(fmt.Sprint(res)))
}

// errNotValkeyLayout reports a further key a write depends on that exists
// but was not written by this store.
func errNotValkeyLayout(op, key, other string) error {
	return fmt.Errorf("writefence: valkey %s %s: %s does not start with a version token: not written by this store", op, Escape(key), Escape(other))
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

// validValkeyVersion reports whether v has the form of a version token.
func validValkeyVersion(v string) bool {
	if len(v) != valkeyVersionLen {
		return false
	}
	for i := range len(v) {
		c := v[i]
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
		s += " " + Escape(e.key)
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
