package writefence

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The writes of ValkeyConditionalStore: PutIfVersion and PutIfBranded, on
// the WATCH path or the Script path.

// PutIfVersion implements ConditionalStore. A non-empty expectVersion that
// is not a version of this store's forms (a token, or the version of a
// damaged value) cannot equal the current version, so it returns an error
// matching ErrConflict without a round trip.
func (s *ValkeyConditionalStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.put(ctx, key, [][]byte{data}, expectVersion, nil)
}

var _ PartsPutter = (*ValkeyConditionalStore)(nil)

// PutPartsIfVersion implements PartsPutter: PutIfVersion of the parts
// joined, laid out straight into the value the store writes.
func (s *ValkeyConditionalStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
	return s.put(ctx, key, parts, expectVersion, nil)
}

var _ BrandedPutter = (*ValkeyConditionalStore)(nil)

// PutIfBranded implements BrandedPutter: PutIfVersion that also reads
// brandKey inside the write's own atomic step (WATCHed with key and checked
// before MULTI/EXEC, or inside the script), and writes only if it holds an
// intact value of this store whose data is exactly identity. An absent
// brand key or another identity refuses with a *WireError (ErrWire) and
// writes nothing; a brand changed between the check and EXEC aborts the
// write with ErrConflict, and the retry sees the new brand. A brand key of
// another type (WRONGTYPE, matching errors.ErrUnsupported), one the ACL
// user may not read (NOPERM, matching fs.ErrPermission) or one that is not
// an intact value of this store fails the write with a *StoreError, never
// with ErrWire or ErrNotFound. It costs no round trip more than
// PutIfVersion. An empty brandKey, or key equal to it, is an invalid
// argument.
func (s *ValkeyConditionalStore) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expectVersion string) (string, error) {
	switch {
	case brandKey == "":
		return "", invalidArg("brand key", "empty")
	case key == brandKey:
		return "", invalidArg("key", "%s is the brand key", esc(key))
	}
	return s.put(ctx, key, parts, expectVersion, &valkeyBrand{key: brandKey, identity: identity})
}

// put is PutIfVersion, with the brand check when brand is not nil.
func (s *ValkeyConditionalStore) put(ctx context.Context, key string, parts [][]byte, expectVersion string, brand *valkeyBrand) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if expectVersion != "" && !validValkeyVersion(expectVersion) && !validValkeyDamagedVersion(expectVersion) {
		return "", storeErr("valkey put", key, ErrConflict,
			fmt.Errorf("%s is not a version this store issues", esc(expectVersion)))
	}
	if err := s.checkStandalone(ctx, "put", key); err != nil {
		return "", err
	}
	version := newValkeyVersion()
	value := valkeyValue(version, parts)
	var err error
	if s.Script {
		err = s.putScript(ctx, key, value, expectVersion, brand)
	} else {
		err = s.putWatch(ctx, key, value, expectVersion, brand)
	}
	if err != nil {
		return "", err
	}
	return version, nil
}

// valkeyBrand is the brand a write depends on: the brand key and the
// identity it must hold.
type valkeyBrand struct{ key, identity string }

// valkeyBrandReadLimit bounds what a write reads of the brand key's data.
// An identity is far shorter; a longer value is refused all the same, cut.
const valkeyBrandReadLimit = maxHeaderSize

// verdict is the brand check over what a write read of the brand key: its
// value cut at valkeyBrandReadLimit bytes of data. A value read whole must
// be intact (see valkeyCheck); one longer than the read is compared cut,
// and cannot equal an identity.
func (b *valkeyBrand) verdict(key string, exists bool, value string) error {
	if !exists {
		return compareBrand(b.key, b.identity, nil, false)
	}
	if len(value) <= valkeyHeaderLen+valkeyBrandReadLimit {
		if check := valkeyCheck(value); check != "" {
			return b.notIntact(key, valkeyDamagedVersion(value), check)
		}
	}
	return compareBrand(b.key, b.identity, []byte(value[valkeyHeaderLen:]), true)
}

// notIntact reports a brand key that exists but is not an intact value of
// this store: damage, final, as a Get of the brand key reports it, with the
// damaged version of the value read.
func (b *valkeyBrand) notIntact(key, version, check string) error {
	return storeErr("valkey put", key, nil,
		&CorruptError{Key: b.key, Version: version, Check: "brand key: " + check})
}

// valkeyPrecondition decides a write over what the WATCH path read of key
// (cur, when it exists): nil to write, a *CorruptError over damaged bytes
// that expectVersion does not name, an error matching ErrConflict for a
// failed precondition. The put script repeats it in Lua.
func valkeyPrecondition(key string, exists bool, cur, expectVersion string) error {
	if !exists {
		if expectVersion != "" {
			return storeErr("valkey put", key, ErrConflict, nil)
		}
		return nil
	}
	if check := valkeyCheck(cur); check != "" {
		if damaged := valkeyDamagedVersion(cur); expectVersion != damaged {
			return &CorruptError{Key: key, Version: damaged, Check: check}
		}
		return nil
	}
	if expectVersion == "" || cur[valkeyDigestLen:valkeyHeaderLen] != expectVersion {
		return storeErr("valkey put", key, ErrConflict, nil)
	}
	return nil
}

// putWatch is the WATCH path: round trip one is WATCH on key (and the
// brand key) followed by the reads, pipelined; round trip two is MULTI,
// SET, EXEC; with WaitReplicas set, round trip three is WAIT. Everything
// runs on one dedicated connection. Whenever EXEC did not run, an UNWATCH
// is sent before the connection goes back to the pool, so no WATCH
// outlives the call; a connection in an unknown state (a transport error,
// a cancelled ctx) is closed by the client instead of pooled.
func (s *ValkeyConditionalStore) putWatch(ctx context.Context, key string, value []byte, expectVersion string, brand *valkeyBrand) error {
	// No keys here: the WATCH travels in the first pipeline below, so
	// Client.Watch does not cost a round trip of its own. It does not know
	// about that WATCH, hence the explicit UNWATCH.
	return s.client.Watch(ctx, func(tx *redis.Tx) error {
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
		watch := redis.NewStatusCmd(ctx, "watch", key)
		if brand != nil {
			watch = redis.NewStatusCmd(ctx, "watch", key, brand.key)
		}
		read := tx.Pipeline()
		_ = read.Process(ctx, watch)
		exists := read.Exists(ctx, key)
		current := read.GetRange(ctx, key, 0, valkeyReadEnd(limit))
		var brandExists *redis.IntCmd
		var brandValue *redis.StringCmd
		if brand != nil {
			brandExists = read.Exists(ctx, brand.key)
			brandValue = read.GetRange(ctx, brand.key, 0, valkeyHeaderLen+valkeyBrandReadLimit)
		}
		_, err := read.Exec(ctx)
		if err != nil {
			what := "the key"
			if brand != nil && current.Err() == nil && valkeyErrorCode(brandValue.Err()) == "WRONGTYPE" {
				what = "brand key " + esc(brand.key)
			}
			return valkeyErrorAbout("put", key, what, err)
		}
		// The value is checked as the client returned it, a string, and
		// never copied: it can be as large as the limit.
		cur, found := current.Val(), exists.Val() != 0
		if found && int64(len(cur))-valkeyHeaderLen > limit {
			return tooLarge("valkey put", key, limit)
		}
		if brand != nil {
			if err := brand.verdict(key, brandExists.Val() != 0, brandValue.Val()); err != nil {
				return err
			}
		}
		if err := valkeyPrecondition(key, found, cur, expectVersion); err != nil {
			return err
		}

		// The client would send the write on a cancelled ctx: refuse here,
		// so a cancelled call writes nothing.
		if err := ctx.Err(); err != nil {
			return err
		}
		write := tx.TxPipeline()
		set := write.Set(ctx, key, value, 0)
		_, err = write.Exec(ctx)
		// EXEC discards the WATCH whether it commits or aborts; an EXECABORT
		// (a command refused while queued) discards it too.
		if err == nil || errors.Is(err, redis.TxFailedErr) || redis.IsExecAbortError(err) {
			execRan = true
		}
		if errors.Is(err, redis.TxFailedErr) {
			return storeErr("valkey put", key, ErrConflict, err)
		}
		if err != nil {
			// A SET refused while queued (NOPERM for a user who may only
			// read the key) discards the transaction: say why.
			return valkeyError("put", key, valkeyQueuedError(err, set))
		}
		if s.WaitReplicas > 0 {
			return s.wait(ctx, tx, "put", key)
		}
		return nil
	})
}

// valkeyPutScript is the one-round-trip check-and-set, in the order of the
// WATCH path: the size, the brand, then the precondition. STRLEN comes
// first so a key of another type fails with WRONGTYPE, as on the WATCH
// path; EXISTS only tells an empty value from none. A current value equal
// to the new one can only be this very write (its token is new), applied
// by an earlier attempt whose reply was lost: it reports success, so a
// retried script never turns its own write into a conflict, even when the
// brand changed since it landed (it was admitted under the right brand);
// it writes the wait key so that a WAIT after it has a write of this
// connection to wait for.
//
// KEYS[1]: the data key; then the brand key, when ARGV[5] is given; then
// the wait key, when ARGV[4] is "1". Only the keys the script touches are
// declared, because the server checks the ACL of every declared key: a
// user needs no access to the wait key unless it WAITs. ARGV[1]: the
// expected version, "" for absent. ARGV[2]: the new value. ARGV[3]: the
// read limit. ARGV[4]: "1" when the caller will WAIT. With a brand key,
// ARGV[5]: the identity it must hold; ARGV[6]: the last byte index of it
// to read. Returns 1 when written, 0 on a failed
// precondition, {"toolarge"}, {"corrupt", check, damaged version}, or a
// brand refusal: {"absent"}, {"layout", check, damaged version} for a value
// that is not an intact value of this store, or {"found", data}.
var valkeyPutScript = redis.NewScript(valkeyCheckLua + `
local brandKey = ARGV[5] and KEYS[2]
local waitKey = ARGV[4] == '1' and KEYS[#KEYS]
local size = redis.call('STRLEN', KEYS[1])
local exists = size > 0 or redis.call('EXISTS', KEYS[1]) == 1
local current, damaged
if exists then
  if size - 72 > tonumber(ARGV[3]) then return {'toolarge'} end
  local v = redis.call('GET', KEYS[1])
  if v == ARGV[2] then
    if waitKey then redis.call('SET', waitKey, '') end
    return 1
  end
  local c = check(v)
  if c then
    damaged = {'corrupt', c, 'damaged-' .. redis.sha1hex(v)}
  else
    current = string.sub(v, 41, 72)
  end
end
if brandKey then
  local brand = redis.call('GETRANGE', brandKey, 0, tonumber(ARGV[6]))
  if redis.call('EXISTS', brandKey) == 0 then
    return {'absent'}
  end
  if string.len(brand) <= tonumber(ARGV[6]) then
    local c = check(brand)
    if c then return {'layout', c, 'damaged-' .. redis.sha1hex(brand)} end
  end
  if string.sub(brand, 73) ~= ARGV[5] then
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
func (s *ValkeyConditionalStore) putScript(ctx context.Context, key string, value []byte, expectVersion string, brand *valkeyBrand) error {
	wait := "0"
	if s.WaitReplicas > 0 {
		wait = "1"
	}
	limit := s.limit()
	keys := []string{key}
	args := []any{expectVersion, value, limit, wait}
	if brand != nil {
		keys = append(keys, brand.key)
		args = append(args, brand.identity, valkeyHeaderLen+valkeyBrandReadLimit)
	}
	if s.WaitReplicas > 0 {
		keys = append(keys, valkeyWaitKey)
	}
	var res any
	// The script runs on a connection of its own: go-redis retries a
	// command whose reply was lost on another pooled connection, and a
	// re-sent script that finds a rival's write after its own would
	// report a conflict for a write that landed. A dedicated connection
	// fails the retry instead, so the error stays ambiguous, as it is. The
	// WAIT must run on that connection too, after a write of its own.
	err := s.client.Watch(ctx, func(tx *redis.Tx) error {
		var err error
		res, err = valkeyPutScript.Run(ctx, tx, keys, args...).Result()
		if err != nil {
			what := "the key"
			if brand != nil {
				what = "the key or brand key " + esc(brand.key)
			}
			return valkeyErrorAbout("put", key, what, err)
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
			return storeErr("valkey put", key, ErrConflict, nil)
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
		case brand == nil:
		case what == "absent" && len(r) == 1:
			return compareBrand(brand.key, brand.identity, nil, false)
		case what == "layout" && len(r) == 3:
			check, _ := r[1].(string)
			version, _ := r[2].(string)
			return brand.notIntact(key, version, check)
		case what == "found" && len(r) == 2:
			found, _ := r[1].(string)
			return compareBrand(brand.key, brand.identity, []byte(found), true)
		}
	}
	return valkeyUnexpected("put", key, res)
}
