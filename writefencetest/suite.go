package writefencetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/writefence/writefence"
)

// Options are the settings of TestConditionalStore that only the store's
// author can give: how to damage the store from outside, its read limit
// and the part size of its blobs. A nil *Options is the zero value, which
// skips the checks that need them.
type Options struct {
	// Damage, when set, damages the value stored at key from outside the
	// store, as a disk fault, a hand edit or a program writing the object
	// directly would, bypassing the store's conditional write: where the
	// store keeps its version beside the bytes (a file, a Valkey value) it
	// changes the bytes in place and leaves the version; where every write
	// gets a new version (S3, GCS, MemStore) it overwrites the object with
	// the damaged bytes. It must reach the store newStore returns in the
	// subtest it is called from (a newStore over one shared bucket,
	// directory or database, with Damage writing there, does). Nil skips
	// the Damage checks.
	Damage func(ctx context.Context, key string, f Fault) error

	// ReadLimit, when positive, is the store's read limit in bytes, as the
	// store was configured: Get and GetPrefix must read an object of
	// exactly ReadLimit bytes and refuse a larger one with
	// writefence.ErrTooLarge (or the write of it may be refused). Zero
	// lets the kit learn the limit: when the store refuses Payload/1MiB's
	// object with ErrTooLarge, at write or at read, the kit looks for the
	// largest object the store writes and reads and checks the limit
	// there; a store that holds 1 MiB has its limit left unchecked. Either
	// way the limit must be at least 4 KiB, a record's header.
	ReadLimit int64

	// BlobPartSize, when positive, is the part size in bytes in which the
	// store's CreateBlob uploads a blob, as the store was configured:
	// Blobs/RoundTrip streams a blob of two parts and a byte, and
	// Blobs/FailingReader fails a reader after a part and a byte, so the
	// store's multipart path and its abort run. Zero means 5 MiB, the
	// least part S3 allows.
	BlobPartSize int64
	// KeyPrefix, when set, starts every key the suite writes, before its
	// random prefix of each subtest. A store whose atomic steps reach
	// only keys that share part of their names (a Valkey cluster: a hash
	// tag, such as "{writefencetest}") can so run the checks of a write
	// that depends on two keys (PutIfBranded), which it would otherwise
	// refuse as unsupported; empty means no prefix.
	KeyPrefix string

	// OverwriteReads, when positive, is how many reads that overlap a
	// write Get/UnderOverwrite makes before it stops; zero means 21,000,
	// which catches a store that mispairs 1 read in 3,000 in all but 1 run
	// in 1,000. Fewer still catch a read path that takes bytes and version
	// from two responses (such a path mispairs on a large share of the
	// reads under overwrite), but miss a rare mispairing more often: at
	// n reads, a store that mispairs 1 read in k passes unseen in about
	// e^(-n/k) of runs. Give fewer only where a rare mispairing by the
	// server is not what the run is for: an adapter's read path checked
	// against a server known to pair each read from one response, or a
	// second configuration of a store checked in full elsewhere.
	OverwriteReads int

	// Only, when set, is a regular expression: only the checks whose
	// names (Group/Check, as the subtests are named, such as
	// "Get/TooLarge") it matches run, and the others are not started. For
	// a second configuration of a store checked in full elsewhere, or a
	// test of its own for one clause. Empty runs every check.
	Only string

	// Wire, when set, counts the store's traffic, for Fence/Reads: the
	// round trips and bytes of the reads a Fence makes of a record much
	// larger than its header. Nil skips the check.
	Wire *Wire

	// Wrap, when set, returns a store that embeds s, the store under test,
	// and overrides its Get and PutIfVersion with methods that call o's,
	// as a quota or an audit log over an adapter would, for
	// Fence/Overrides: a Fence must go through the overrides, never
	// through the capabilities the wrapper inherits. Embedding needs the
	// store's concrete type, which only its author has. Nil skips the
	// check.
	Wrap func(s writefence.ConditionalStore, o *Overrides) writefence.ConditionalStore
}

// Wire counts a store's traffic (Options.Wire).
type Wire struct {
	// Count returns the round trips the store has made so far and the
	// bytes its reads have received so far, as the caller counts them (an
	// HTTP transport, a gRPC interceptor, a database connection).
	// Required.
	Count func() (trips, read int64)

	// WriteTrips is how many round trips one conditional write takes;
	// zero means 1.
	WriteTrips int64

	// Slack is how many bytes a read or a write may receive beside the
	// bytes of the record it reads (a version token, a protocol's
	// framing); zero means none.
	Slack int64
}

// Fault is one damage Options.Damage does. Its fields are those of the
// damage helpers the writefence module's own tests use, so a caller
// converts one to the other.
type Fault struct {
	// Flip is the index, in the data as the store's Get returns it, of the
	// byte whose lowest bit flips; it is taken modulo the data's length.
	Flip int

	// Empty leaves the key holding nothing at all instead: a file
	// truncated to zero bytes, a Valkey value set to "", an empty object.
	// Flip is then ignored.
	Empty bool
}

// apply returns data as f leaves it.
func (f Fault) apply(data []byte) []byte {
	if f.Empty {
		return []byte{}
	}
	c := bytes.Clone(data)
	if n := len(c); n > 0 {
		c[(f.Flip%n+n)%n] ^= 1
	}
	return c
}

// TestConditionalStore runs the conformance suite against the stores
// newStore returns. newStore is called once per subtest, with that
// subtest's t; it may return the same store every time, because each
// subtest works under a random key prefix of its own. opts may be nil.
// See the package documentation for what is checked.
func TestConditionalStore(t *testing.T, newStore func(t *testing.T) writefence.ConditionalStore, opts *Options) {
	if opts == nil {
		opts = &Options{}
	}
	var only *regexp.Regexp
	if opts.Only != "" {
		var err error
		if only, err = regexp.Compile(opts.Only); err != nil {
			t.Fatalf("Options.Only: %v", err)
		}
	}
	groups := []struct {
		name   string
		checks []check
	}{
		{"Get", []check{
			{"Missing", testGetMissing},
			{"UnderOverwrite", testGetUnderOverwrite},
			{"TooLarge", testGetTooLarge},
		}},
		{"Create", []check{
			{"NewKey", testCreateNewKey},
			{"Existing", testCreateExisting},
		}},
		{"Update", []check{
			{"Current", testUpdateCurrent},
			{"Stale", testUpdateStale},
			{"Missing", testUpdateMissing},
			{"Deleted", testUpdateDeleted},
			{"Malformed", testUpdateMalformed},
		}},
		{"Tokens", []check{
			{"NameContents", testTokensNameContents},
			{"AfterDelete", testTokensAfterDelete},
		}},
		{"Errors", []check{
			{"NotFound", testErrorsNotFound},
			{"Conflict", testErrorsConflict},
		}},
		{"GetPrefix", []check{
			{"MatchesGet", testPrefixMatchesGet},
			{"Sizes", testPrefixSizes},
			{"Token", testPrefixToken},
			{"Missing", testPrefixMissing},
		}},
		{"Delete", []check{
			{"Missing", testDeleteMissing},
		}},
		{"PutParts", []check{
			{"MatchesPut", testPartsMatchPut},
			{"Aliasing", testPartsAliasing},
		}},
		{"Branded", brandedChecks},
		{"Damage", []check{
			{"Flip", testDamageFlip},
			{"Empty", testDamageEmpty},
			{"Twice", testDamageTwice},
			{"Middle", testDamageMiddle},
		}},
		{"Settle", []check{
			{"AboveDamage", testSettleAboveDamage},
			{"RepeatDamage", testSettleRepeatDamage},
		}},
		{"Blobs", blobChecks},
		{"Floor", floorChecks},
		{"Lister", []check{
			{"Prefix", testListPrefix},
			{"Stop", testListStop},
			{"Canceled", testListCanceled},
		}},
		{"Payload", []check{
			{"Empty", testPayloadEmpty},
			{"AllBytes", testPayloadAllBytes},
			{"1MiB", testPayloadLarge},
		}},
		{"Aliasing", []check{
			{"Put", testAliasingPut},
			{"Get", testAliasingGet},
		}},
		{"Canceled", []check{
			{"Get", testCanceledGet},
			{"Put", testCanceledPut},
		}},
		{"Fence", []check{
			{"Reads", testFenceReads},
			{"Overrides", testFenceOverrides},
		}},
		{"Race", []check{
			{"Update", testRaceUpdate},
			{"Create", testRaceCreate},
			{"Branded", testRaceBranded},
			{"BrandFlip", testRaceBrandFlip},
			{"FencePush", testRaceFencePush},
			{"CreateBlob", testRaceCreateBlob},
		}},
	}
	lim := new(limits)
	for _, g := range groups {
		if only != nil && !slices.ContainsFunc(g.checks, func(c check) bool { return only.MatchString(g.name + "/" + c.name) }) {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.checks {
				if only != nil && !only.MatchString(g.name+"/"+c.name) {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					c.run(t, newScope(t, newStore, opts, lim))
				})
			}
		})
	}
}

// check is one clause of the contract.
type check struct {
	name string
	run  func(t *testing.T, sc *scope)
}

// scope is one subtest's store, options and key space.
type scope struct {
	s      writefence.ConditionalStore
	opts   *Options
	limits *limits // the store's size limit, shared by the run's subtests
	prefix string

	mu    sync.Mutex // guards keys and blobs
	keys  []string   // every key handed out, deleted at cleanup
	blobs []string   // every blob key handed out, deleted at cleanup
}

// cleanupTimeout bounds the deletes a subtest makes when it ends; its own
// context is already cancelled by then.
const cleanupTimeout = 30 * time.Second

func newScope(t *testing.T, newStore func(t *testing.T) writefence.ConditionalStore, opts *Options, lim *limits) *scope {
	t.Helper()
	s := newStore(t)
	if s == nil {
		t.Fatal("newStore returned a nil store")
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	sc := &scope{s: s, opts: opts, limits: lim, prefix: opts.KeyPrefix + "writefencetest/" + hex.EncodeToString(b) + "/"}
	if d, ok := s.(writefence.Deleter); ok {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			sc.mu.Lock()
			defer sc.mu.Unlock()
			for _, k := range sc.keys {
				if err := d.Delete(ctx, k); err != nil {
					t.Errorf("cleanup: Delete(%q): %v", k, err)
				}
			}
		})
	}
	return sc
}

// key returns a key under the subtest's prefix and remembers it for cleanup.
func (sc *scope) key(name string) string {
	return sc.track(sc.prefix + name)
}

func (sc *scope) track(key string) string {
	sc.mu.Lock()
	sc.keys = append(sc.keys, key)
	sc.mu.Unlock()
	return key
}

// implemented returns the store as the optional interface C, named name,
// or skips the test when the store does not implement it.
func implemented[C any](t *testing.T, sc *scope, name string) C {
	t.Helper()
	c, ok := sc.s.(C)
	if !ok {
		t.Skip("the store does not implement writefence." + name)
	}
	return c
}

// deleter returns the store's Deleter, or skips the test when it has none.
func deleter(t *testing.T, sc *scope) writefence.Deleter {
	t.Helper()
	return implemented[writefence.Deleter](t, sc, "Deleter")
}

// writePath is one way to make a conditional write: the store's own
// PutIfVersion, or writefence.PutParts with the data split in two, which
// is how a Fence writes (through the store's PutPartsIfVersion when it
// declares one, else through PutIfVersion of the joined parts). The
// clauses of the core contract hold on both.
type writePath struct {
	name  string
	write func(ctx context.Context, s writefence.ConditionalStore, key string, data []byte, expect string) (string, error)
}

var writePaths = []writePath{
	{"PutIfVersion", func(ctx context.Context, s writefence.ConditionalStore, key string, data []byte, expect string) (string, error) {
		return s.PutIfVersion(ctx, key, data, expect)
	}},
	{"PutParts", func(ctx context.Context, s writefence.ConditionalStore, key string, data []byte, expect string) (string, error) {
		return writefence.PutParts(ctx, s, key, split(data), expect)
	}},
}

// call describes a write through p for a failure message.
func (p writePath) call(key string, data []byte, expect string) string {
	return fmt.Sprintf("%s(%q, %d bytes, %q)", p.name, key, len(data), expect)
}

// split returns data as two parts, its halves, sharing data's array.
func split(data []byte) [][]byte {
	h := len(data) / 2
	return [][]byte{data[:h:h], data[h:]}
}

// put writes through writefence.PutParts, with the data in two parts, and
// fails the test unless the write lands with a token.
func put(t *testing.T, s writefence.ConditionalStore, key string, data []byte, expect string) string {
	t.Helper()
	v, err := writefence.PutParts(t.Context(), s, key, split(data), expect)
	return landed(t, fmt.Sprintf("PutParts(%q, %d bytes in 2 parts, %q)", key, len(data), expect), v, err)
}

// landed returns v, the token call returned, and fails the test unless the
// write landed with one.
func landed(t *testing.T, call, v string, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if v == "" {
		t.Fatalf("%s landed but returned an empty version token", call)
	}
	return v
}

// wantContent fails the test unless Get returns exactly data and version.
func wantContent(t *testing.T, s writefence.ConditionalStore, key string, data []byte, version string) {
	t.Helper()
	got, v, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("Get(%q) returned %s; want %s", key, describe(got), describe(data))
	}
	if v != version {
		t.Errorf("Get(%q) returned version %q; want %q, the version the write of these bytes returned", key, v, version)
	}
}

// wantMissing fails the test unless Get reports key as not found.
func wantMissing(t *testing.T, s writefence.ConditionalStore, key string) {
	t.Helper()
	got, v, err := s.Get(t.Context(), key)
	switch {
	case err == nil:
		t.Errorf("Get(%q) returned %s with version %q; want an error matching writefence.ErrNotFound", key, describe(got), v)
	case !errors.Is(err, writefence.ErrNotFound):
		t.Errorf("Get(%q): %v; want an error matching writefence.ErrNotFound", key, err)
	default:
		wantTyped(t, err, fmt.Sprintf("Get(%q)", key))
	}
}

// wantConflict fails the test unless err is a refused precondition.
func wantConflict(t *testing.T, err error, call string) {
	t.Helper()
	wantOnly(t, err, call, "writefence.ErrConflict", writefence.ErrConflict, writefence.ErrNotFound)
	wantTyped(t, err, call)
}

// wantOnly fails the test unless err matches want, which the message calls
// name, and none of the sentinels in not.
func wantOnly(t *testing.T, err error, call, name string, want error, not ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded; want an error matching %s", call, name)
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: %v; want an error matching %s", call, err, name)
		return
	}
	for _, n := range not {
		if errors.Is(err, n) {
			t.Errorf("%s: %v matches %s and %q too", call, err, name, n)
		}
	}
}

// describe summarises a payload for a failure message without dumping it.
func describe(b []byte) string {
	if len(b) <= 32 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:32])
}

func testGetMissing(t *testing.T, sc *scope) {
	key := sc.key("missing")
	_, _, err := sc.s.Get(t.Context(), key)
	if errors.Is(err, writefence.ErrConflict) {
		t.Errorf("Get(%q): %v matches writefence.ErrConflict; a missing key is not a conflict", key, err)
	}
	wantMissing(t, sc.s, key)
}

func testCreateNewKey(t *testing.T, sc *scope) {
	for _, p := range writePaths {
		key := sc.key("new-" + p.name)
		data := []byte("first by " + p.name)
		v, err := p.write(t.Context(), sc.s, key, data, "")
		v = landed(t, "a create-only "+p.call(key, data, ""), v, err)
		wantContent(t, sc.s, key, data, v)
	}
}

func testCreateExisting(t *testing.T, sc *scope) {
	key := sc.key("existing")
	v := put(t, sc.s, key, []byte("first"), "")
	for _, p := range writePaths {
		_, err := p.write(t.Context(), sc.s, key, []byte("second"), "")
		wantConflict(t, err, "a second create-only "+p.call(key, []byte("second"), ""))
		wantContent(t, sc.s, key, []byte("first"), v)
	}
}

func testUpdateCurrent(t *testing.T, sc *scope) {
	key := sc.key("current")
	v := put(t, sc.s, key, []byte("first"), "")
	for _, p := range writePaths {
		data := []byte("updated by " + p.name)
		next, err := p.write(t.Context(), sc.s, key, data, v)
		next = landed(t, p.call(key, data, v), next, err)
		if next == v {
			t.Errorf("%s to different bytes returned the old version %q; a token must not name two contents", p.call(key, data, v), v)
		}
		wantContent(t, sc.s, key, data, next)
		v = next
	}
}

func testUpdateStale(t *testing.T, sc *scope) {
	key := sc.key("stale")
	v1 := put(t, sc.s, key, []byte("first"), "")
	v2 := put(t, sc.s, key, []byte("second"), v1)
	for _, p := range writePaths {
		_, err := p.write(t.Context(), sc.s, key, []byte("third"), v1)
		wantConflict(t, err, p.call(key, []byte("third"), v1)+" with the stale version")
		wantContent(t, sc.s, key, []byte("second"), v2)
	}
}

// madeUpVersion is decimal so it is a well-formed token for stores whose
// tokens are numbers (GCS generations) as well as an If-Match value for
// ETag stores; no store should ever have issued it for a fresh key.
const madeUpVersion = "7340032000000000001"

func testUpdateMissing(t *testing.T, sc *scope) {
	key := sc.key("missing")
	// A token the store really issued, but for another key.
	other := sc.key("other")
	borrowed := put(t, sc.s, other, []byte("other"), "")
	for _, expect := range []string{madeUpVersion, borrowed} {
		wantRefusedMissing(t, sc, key, []byte("never"), expect, "a missing key")
	}
}

// wantRefusedMissing checks that a write of data to key, which what
// describes, conditioned on expect, is refused with ErrConflict on every
// write path and leaves the key missing.
func wantRefusedMissing(t *testing.T, sc *scope, key string, data []byte, expect, what string) {
	t.Helper()
	for _, p := range writePaths {
		_, err := p.write(t.Context(), sc.s, key, data, expect)
		wantConflict(t, err, p.call(key, data, expect)+" of "+what)
		wantMissing(t, sc.s, key)
	}
}

func testUpdateDeleted(t *testing.T, sc *scope) {
	d := deleter(t, sc)
	key := sc.key("deleted")
	v := put(t, sc.s, key, []byte("first"), "")
	if err := d.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	wantMissing(t, sc.s, key)
	wantRefusedMissing(t, sc, key, []byte("second"), v, "a deleted key with its last version")
}

// testDeleteMissing checks that deleting a key that does not exist, never
// written or deleted already, is not an error, and leaves it missing: two
// tools may delete one key at once.
func testDeleteMissing(t *testing.T, sc *scope) {
	d := deleter(t, sc)
	never := sc.key("delete-never")
	if err := d.Delete(t.Context(), never); err != nil {
		t.Errorf("Delete(%q) of a key never written: %v; want nil", never, err)
	}
	wantMissing(t, sc.s, never)
	key := sc.key("delete-twice")
	put(t, sc.s, key, []byte("deleted twice"), "")
	for i := range 2 {
		if err := d.Delete(t.Context(), key); err != nil {
			t.Errorf("Delete(%q), time %d: %v; want nil", key, i+1, err)
		}
		wantMissing(t, sc.s, key)
	}
}

// malformedVersions are versions of forms no store issues, built around a
// real token v: words, a NUL, the wildcard, v quoted and v with a space,
// which an HTTP header would quote, trim or widen into another condition
// if a store passed them on as they are, and "0", which no counter that
// starts at 1 and no GCS generation ever is.
func malformedVersions(v string) []string {
	return []string{"not a token", "not\x00a token", "*", `"` + v + `"`, v + " ", "0"}
}

// testUpdateMalformed checks that a version the store never issues cannot
// equal the current one: a write conditioned on it is refused with
// ErrConflict, not another error, and writes nothing, on an existing key
// and on a missing one alike.
func testUpdateMalformed(t *testing.T, sc *scope) {
	key := sc.key("malformed")
	v := put(t, sc.s, key, []byte("stored"), "")
	missing := sc.key("malformed-missing")
	for _, p := range writePaths {
		for _, expect := range malformedVersions(v) {
			_, err := p.write(t.Context(), sc.s, key, []byte("never"), expect)
			wantConflict(t, err, p.call(key, []byte("never"), expect)+" of an existing key")
			wantContent(t, sc.s, key, []byte("stored"), v)
		}
		for _, expect := range malformedVersions(madeUpVersion) {
			_, err := p.write(t.Context(), sc.s, missing, []byte("never"), expect)
			wantConflict(t, err, p.call(missing, []byte("never"), expect)+" of a missing key")
			wantMissing(t, sc.s, missing)
		}
	}
}

func testTokensNameContents(t *testing.T, sc *scope) {
	key := sc.key("tokens")
	a, b := []byte("content A"), []byte("content B")
	vA := put(t, sc.s, key, a, "")
	wantContent(t, sc.s, key, a, vA)
	vB := put(t, sc.s, key, b, vA)
	for range 3 {
		got, v, err := sc.s.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if v == vA && !bytes.Equal(got, a) {
			t.Fatalf("Get(%q) returned %s with version %q, the version of %q: a token names two contents", key, describe(got), v, a)
		}
		if !bytes.Equal(got, b) || v != vB {
			t.Fatalf("Get(%q) returned %s version %q; want %q version %q", key, describe(got), v, b, vB)
		}
	}
}

// testTokensAfterDelete creates, updates and deletes one key, three times
// over: no token returned, by a write or a read, may name two different
// contents, across the deletes. A per-key counter that restarts on delete
// fails here; through a Fence's version cache it would let a push at a low
// epoch land over a record at a higher one.
func testTokensAfterDelete(t *testing.T, sc *scope) {
	d := deleter(t, sc)
	key := sc.key("recreated")
	named := map[string][]byte{} // every token seen, and the contents it named
	note := func(call, version string, data []byte) {
		t.Helper()
		if prev, ok := named[version]; ok && !bytes.Equal(prev, data) {
			t.Fatalf("%s returned version %q for %s, but that version named %s before: a token names two contents across a delete",
				call, version, describe(data), describe(prev))
		}
		named[version] = data
	}
	for cycle := range 3 {
		expect := ""
		for _, step := range []string{"create", "update"} {
			data := fmt.Appendf(nil, "cycle %d %s", cycle, step)
			expect = put(t, sc.s, key, data, expect)
			note(fmt.Sprintf("PutParts(%q) of cycle %d's %s", key, cycle, step), expect, data)
			got, v, err := sc.s.Get(t.Context(), key)
			if err != nil {
				t.Fatalf("Get(%q): %v", key, err)
			}
			note(fmt.Sprintf("Get(%q)", key), v, got)
			if !bytes.Equal(got, data) || v != expect {
				t.Fatalf("Get(%q) returned %s version %q; want %q version %q", key, describe(got), v, data, expect)
			}
		}
		if err := d.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		wantMissing(t, sc.s, key)
	}
}

func testPayloadEmpty(t *testing.T, sc *scope) {
	key := sc.key("empty")
	v := put(t, sc.s, key, []byte{}, "")
	wantContent(t, sc.s, key, nil, v)
	// A nil slice is an empty payload too.
	v = put(t, sc.s, key, nil, v)
	wantContent(t, sc.s, key, []byte{}, v)
}

func testPayloadAllBytes(t *testing.T, sc *scope) {
	key := sc.key("binary")
	data := make([]byte, 512)
	for i := range 256 {
		data[i] = byte(i)
		data[511-i] = byte(i) // and again backwards, so no value only ends the payload
	}
	v := put(t, sc.s, key, data, "")
	wantContent(t, sc.s, key, data, v)
}

// largePayload is the size of Payload/1MiB's object, unless the store's
// size limit is smaller.
const largePayload = 1 << 20

// testPayloadLarge writes largePayload random bytes, or the store's size
// limit (Options.ReadLimit, or learned) when that is less, and reads them
// back.
func testPayloadLarge(t *testing.T, sc *scope) {
	key := sc.key("large")
	n := int64(largePayload)
	if limit := sc.sizeLimit(t); limit > 0 {
		n = min(n, limit)
	}
	data := make([]byte, n)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	v := put(t, sc.s, key, data, "")
	wantContent(t, sc.s, key, data, v)
}

func testAliasingPut(t *testing.T, sc *scope) {
	for _, p := range writePaths {
		key := sc.key("alias-put-" + p.name)
		buf := []byte("first")
		v, err := p.write(t.Context(), sc.s, key, buf, "")
		v = landed(t, p.call(key, buf, ""), v, err)
		copy(buf, "XXXXX")
		wantContent(t, sc.s, key, []byte("first"), v)

		buf = []byte("second")
		v, err = p.write(t.Context(), sc.s, key, buf, v)
		v = landed(t, p.call(key, buf, v), v, err)
		copy(buf, "YYYYYY")
		wantContent(t, sc.s, key, []byte("second"), v)
	}
}

func testAliasingGet(t *testing.T, sc *scope) {
	key := sc.key("alias-get")
	v := put(t, sc.s, key, []byte("stored"), "")
	got, _, err := sc.s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	for i := range got {
		got[i] = 'X'
	}
	wantContent(t, sc.s, key, []byte("stored"), v)
	prefix, _, _, err := writefence.GetPrefix(t.Context(), sc.s, key, 3)
	if err != nil {
		t.Fatalf("GetPrefix(%q, 3): %v", key, err)
	}
	for i := range prefix {
		prefix[i] = 'Y'
	}
	wantContent(t, sc.s, key, []byte("stored"), v)
}

// wantCanceled fails the test unless err reports the cancellation, and
// only the cancellation.
func wantCanceled(t *testing.T, err error, call string) {
	t.Helper()
	wantOnly(t, err, call+" with a cancelled context", "context.Canceled", context.Canceled,
		writefence.ErrConflict, writefence.ErrNotFound)
}

func canceledContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func testCanceledGet(t *testing.T, sc *scope) {
	key := sc.key("canceled-get")
	put(t, sc.s, key, []byte("stored"), "")
	_, _, err := sc.s.Get(canceledContext(t), key)
	wantCanceled(t, err, fmt.Sprintf("Get(%q)", key))
	_, _, _, err = writefence.GetPrefix(canceledContext(t), sc.s, key, 3)
	wantCanceled(t, err, fmt.Sprintf("GetPrefix(%q, 3)", key))
}

func testCanceledPut(t *testing.T, sc *scope) {
	for _, p := range writePaths {
		key := sc.key("canceled-create-" + p.name)
		_, err := p.write(canceledContext(t), sc.s, key, []byte("never"), "")
		wantCanceled(t, err, "create-only "+p.call(key, []byte("never"), ""))
		wantMissing(t, sc.s, key)

		key = sc.key("canceled-update-" + p.name)
		v := put(t, sc.s, key, []byte("stored"), "")
		_, err = p.write(canceledContext(t), sc.s, key, []byte("never"), v)
		wantCanceled(t, err, p.call(key, []byte("never"), v)+" with the current version")
		wantContent(t, sc.s, key, []byte("stored"), v)
	}
}
