package writefencetest_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// brokenEnv selects the store TestHelperBroken runs the suite against.
const brokenEnv = "WRITEFENCETEST_BROKEN_STORE"

// child is a store for TestHelperBroken, one for every subtest of the
// suite (the suite keeps subtests apart by key prefix), and the options
// the suite gets with it.
type child struct {
	store writefence.ConditionalStore
	opts  *writefencetest.Options
}

// childLimit is the read limit of the children that state one.
const childLimit = 2 << 20

// full is the child of a correct store s, with every option: damage by
// overwrite through s's own Get and PutIfVersion, and s's read limit.
func full(s interface {
	writefence.ConditionalStore
	limit(int64)
}) child {
	s.limit(childLimit)
	return child{s, &writefencetest.Options{Damage: damageBy(testserver.DamageByOverwrite(s)), ReadLimit: childLimit}}
}

// damageBy converts a testserver.Damager into Options.Damage.
func damageBy(d testserver.Damager) func(context.Context, string, writefencetest.Fault) error {
	return func(ctx context.Context, key string, f writefencetest.Fault) error {
		return d(ctx, key, testserver.Fault(f))
	}
}

// limited is a MemStore whose read limit can be set, for full. It
// declares its capabilities, so its blobs are checked.
type limited struct{ writefence.MemStore }

func (m *limited) limit(n int64) { m.MaxObjectSize = n }

func (m *limited) Capabilities() writefence.ConditionalStore { return m }

var childStores = map[string]func() child{
	"memstore":       func() child { return full(new(limited)) },
	"client-compare": func() child { return child{store: new(clientCompareStore)} },
	"ignoring":       func() child { return child{store: new(ignoringStore)} },
	"reused-tokens":  func() child { return child{store: new(counterStore)} },
	"torn-reads":     func() child { return child{store: new(tornStore)} },
	"parts-memstore": func() child { return full(new(partsStore)) },
	"ignoring-parts": func() child { return child{store: &partsStore{ignore: true}} },
	"bare-errors":    func() child { return child{store: &errorsStore{fault: errorsBare}} },
	"keyless-errors": func() child { return child{store: &errorsStore{fault: errorsKeyless}} },
	"lenient-tokens": func() child { return child{store: &tokensStore{fault: tokensLenient}} },
	"strict-tokens":  func() child { return child{store: &tokensStore{fault: tokensInvalid}} },
	"bare-tokens":    func() child { return child{store: &tokensStore{fault: tokensBare}} },
}

// The doubles that differ only in their fault.
func init() {
	for name, fault := range map[string]prefixFault{"stale-prefix": prefixStaleVersion,
		"prefix-size": prefixSizeOfPrefix, "prefix-whole": prefixWholeObject} {
		childStores[name] = func() child { return child{store: &prefixStore{fault: fault}} }
	}
	childStores["prefix-memstore"] = func() child { return full(&prefixStore{fault: prefixCorrect}) }
	for name, fault := range map[string]brandFault{"ignoring-brand": brandIgnored, "once-brand": brandOnce,
		"brand-compare": brandClientCompare} {
		childStores[name] = func() child { return child{store: &brandedStore{fault: fault}} }
	}
	childStores["branded-memstore"] = func() child { return full(&brandedStore{fault: brandChecked}) }
	childStores["blob-write-first-part"] = func() child {
		return child{&blobWriterStore{newBlobStore(blobCorrect)}, &writefencetest.Options{BlobPartSize: blobDoublePart}}
	}
	for name, fault := range map[string]listFault{"list-outside": listOutside, "list-twice": listTwice,
		"list-deleted": listDeleted, "list-nostop": listNoStop, "list-nocancel": listNoCancel} {
		childStores[name] = func() child { return child{store: &listStore{fault: fault}} }
	}
	for name, fault := range map[string]blobFault{"blob-memstore": blobCorrect, "blob-replace": blobReplace,
		"blob-compare": blobCompare, "blob-conflict-lies": blobConflictLies, "blob-in-place": blobInPlace,
		"blob-partial": blobPartial, "blob-lost-part": blobLostPart, "blob-undated": blobUndated,
		"blob-backwards": blobBackwards, "blob-bare-errors": blobBareErrors, "blob-delete-strict": blobDeleteStrict,
		"blob-delete-noop": blobDeleteNoop, "blob-unescaping": blobUnescaping, "blob-list-misses": blobListMisses, "blob-list-lags": blobListLags,
		"blob-list-twice": blobListTwice, "blob-list-outside": blobListOutside, "blob-list-undated": blobListUndated,
		"blob-list-nostop": blobListNoStop, "blob-list-nocancel": blobListNoCancel, "blob-list-one-page": blobListOnePage,
		"blob-list-from-start": blobListFromStart, "blob-list-from-after": blobListFromAfter,
		"blob-delete-one-batch": blobDeleteCut} {
		childStores[name] = func() child {
			return child{newBlobStore(fault), &writefencetest.Options{BlobPartSize: blobDoublePart}}
		}
	}
	for name, fault := range map[string]limitFault{"limit-memstore": limitCorrect, "limit-ignored": limitIgnored,
		"limit-prefix": limitPrefixUnbounded, "limit-off-by-one": limitOffByOne} {
		childStores[name] = func() child {
			s := &limitStore{fault: fault}
			return child{s, &writefencetest.Options{ReadLimit: limitStoreLimit}}
		}
	}
	for name, fault := range map[string]sizedFault{"sized-memstore": sizedCorrect, "sized-lands": sizedLands, "sized-bare": sizedBare} {
		childStores[name] = func() child { return child{store: &sizedStore{fault: fault}} }
	}
	childStores["limit-learned"] = func() child { return child{store: &limitStore{fault: limitCorrect}} }
	childStores["delete-strict"] = func() child { return child{store: new(deleteStrictStore)} }
	for name, whole := range map[string]bool{"wired-memstore": false, "wired-whole": true} {
		childStores[name] = func() child {
			s := &wiredStore{whole: whole}
			return child{s, &writefencetest.Options{Wire: s.wire()}}
		}
	}
	childStores["wrap-memstore"] = func() child {
		return child{new(prefixStore), &writefencetest.Options{Wrap: func(s writefence.ConditionalStore, o *writefencetest.Overrides) writefence.ConditionalStore {
			return overridingStore{s.(*prefixStore), o}
		}}}
	}
	childStores["wrap-declared"] = func() child {
		return child{new(prefixStore), &writefencetest.Options{Wrap: func(s writefence.ConditionalStore, o *writefencetest.Overrides) writefence.ConditionalStore {
			return declaringStore{overridingStore{s.(*prefixStore), o}}
		}}}
	}
	for name, fault := range map[string]sealedFault{"sealed": sealedCorrect, "sealed-unchecked": sealedUnchecked,
		"sealed-write-unchecked": sealedWriteUnchecked, "sealed-prefix-unchecked": sealedPrefixUnchecked,
		"sealed-once": sealedOnce, "sealed-constant": sealedConstant, "sealed-headless": sealedHeadless} {
		childStores[name] = func() child {
			s := &sealedStore{fault: fault}
			return child{s, &writefencetest.Options{Damage: s.damage}}
		}
	}
}

// childRun is what a child test process printed, and how it ended.
type childRun struct {
	out []byte
	err error
}

// runChildren runs the test binary once for each of values, as the test
// run alone (with -test.timeout timeout) and with env set to the value,
// at most slots at once, started in the order given. The ith channel
// yields the ith child; the test's cleanup waits for every child.
func runChildren(t *testing.T, run, env, timeout string, values []string, slots int) []chan childRun {
	ctx := t.Context() // done before the cleanup below waits
	done := make([]chan childRun, len(values))
	free := make(chan struct{}, slots)
	var children sync.WaitGroup
	t.Cleanup(children.Wait)
	for i, v := range values {
		done[i] = make(chan childRun, 1)
		free <- struct{}{}
		children.Go(func() {
			defer func() { <-free }()
			cmd := exec.CommandContext(ctx, os.Args[0],
				"-test.run=^"+run+"$", "-test.v", "-test.count=1", "-test.timeout="+timeout)
			cmd.Env = append(os.Environ(), env+"="+v)
			out, err := cmd.CombinedOutput()
			done[i] <- childRun{out, err}
		})
	}
	return done
}

// childOf returns the value of m that env names in a child process that
// parent started (runChildren), and skips the test in any other process.
func childOf[V any](t *testing.T, env, parent string, m map[string]V) V {
	t.Helper()
	name := os.Getenv(env)
	if name == "" {
		t.Skip("run by " + parent + " in a child process")
	}
	v, ok := m[name]
	require.True(t, ok, "unknown %s=%q", env, name)
	return v
}

// fullReads are the children whose Get/UnderOverwrite reads the default
// count: those it must fail, and the correct doubles of both read paths
// (GetPrefix by Get, and a store's own). TestSuiteHasTeeth checks that
// every child it wants failing there is one of them.
var fullReads = map[string]bool{"memstore": true, "prefix-memstore": true,
	"torn-reads": true, "stale-prefix": true, "prefix-size": true, "prefix-whole": true}

// childReads is the count of Get/UnderOverwrite's reads of the others.
const childReads = 1000

// TestHelperBroken is not a test on its own: TestSuiteHasTeeth runs it in a
// child process, because a failing *testing.T cannot be observed from
// inside the test binary.
func TestHelperBroken(t *testing.T) {
	c := childOf(t, brokenEnv, "TestSuiteHasTeeth", childStores)()
	if c.opts == nil {
		c.opts = &writefencetest.Options{}
	}
	// The children whose faults are not in their blobs check those of a
	// MemStore, which TestMemStore checks at the default part size: here
	// the small part keeps the blobs of each child small.
	if c.opts.BlobPartSize == 0 {
		c.opts.BlobPartSize = blobDoublePart
	}
	// A double reads every blob whole: past its parts, a blob adds
	// nothing to the round trip (TestMemStore's goes past 5 MiB).
	writefencetest.SetBlobFirstChunk(blobDoublePart)
	// Get/UnderOverwrite's default count is sized for a mispairing as rare
	// as the torn double's. The doubles whose reads are MemStore's, or
	// whose faults are elsewhere, pair every read or none the same way at
	// any count; those whose reads are the fault, and the correct doubles
	// of both read paths, read the default count.
	if !fullReads[os.Getenv(brokenEnv)] {
		c.opts.OverwriteReads = childReads
	}
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return c.store }, c.opts)
}

var (
	failedSubtest  = regexp.MustCompile(`--- FAIL: TestHelperBroken/([^/\s]+/[^/\s]+) `)
	skippedSubtest = regexp.MustCompile(`--- SKIP: TestHelperBroken/([^/\s]+/[^/\s]+) `)
	raceSummary    = regexp.MustCompile(`\d+ rounds x .*|\d+ writes, \d+ reads .*`)
)

// The checks a store skips when it lacks an optional interface or an
// option.
var (
	skipLister = []string{"Lister/Canceled", "Lister/Prefix", "Lister/Stop"}
	skipDamage = []string{"Damage/Empty", "Damage/Flip", "Damage/Middle", "Damage/Twice", "Settle/AboveDamage", "Settle/RepeatDamage"}
	skipLimit  = []string{"Get/TooLarge"}
	skipBlobs  = []string{"Blobs/Canceled", "Blobs/Clock", "Blobs/Collect", "Blobs/CreateOnly", "Blobs/Delete", "Blobs/FailingReader",
		"Blobs/Fence", "Blobs/List", "Blobs/ListConsistent", "Blobs/Missing", "Blobs/RoundTrip", "Blobs/StatBlobs", "Blobs/DeleteBlobs",
		"Blobs/WriteBlob", "Race/CreateBlob"}
	skipWire = []string{"Fence/Reads"}
	skipWrap = []string{"Fence/Overrides"}
)

// Which method the helpers call, as the suite logs it.
const (
	ownPrefix       = "writefence.GetPrefix on this store calls its GetPrefix"
	ownParts        = "writefence.PutParts on this store calls its PutPartsIfVersion"
	ownBranded      = "writefence.PutIfBranded on this store calls its PutIfBranded"
	fallbackPaths   = "writefence.PutIfBranded on this store falls back to Get of the brand key"
	ownBlobs        = "a Fence keeps blobs on this store through its own writefence.BlobStore methods"
	undeclaredBlobs = "the store implements writefence.BlobStore but does not declare it as its own"
	noBlobs         = "the store does not implement writefence.BlobStore"
	replacedBlobs   = "this store's CreateBlob replaced an existing key whole instead of refusing it"
	learnedLimit    = "Options.ReadLimit was not set, so the kit checks the store's limit there"
)

// TestSuiteHasTeeth runs the suite against each store in a child process and
// checks which clauses fail: none on a correct store, and on each broken
// store exactly the clauses it breaks, in every run; and which are skipped,
// so that a check that should have run did.
func TestSuiteHasTeeth(t *testing.T) {
	races := []string{"Race/Branded", "Race/BrandFlip", "Race/Create", "Race/FencePush", "Race/Update"}
	prefix := []string{"GetPrefix/MatchesGet", "Get/UnderOverwrite"}
	// What a write that ignores its precondition breaks: a Fence's write
	// over a record deleted or set back lands on it, conditioned on a
	// version it no longer has.
	wrongWrites := []string{"Branded/Matching", "Create/Existing", "Errors/Conflict", "GetPrefix/Token", "PutParts/MatchesPut",
		"Update/Deleted", "Update/Malformed", "Update/Missing", "Update/Stale", "Floor/Deleted", "Floor/SetBack"}
	// The checks that need the caller's help beside damage and a limit.
	unaided := concat(skipWire, skipWrap)
	optional := concat(skipDamage, skipLimit, unaided)
	// The doubles that embed MemStore without declaring capabilities
	// have its blobs but no Fence keeps blobs on them.
	undeclared := concat(optional, skipBlobs)
	tests := []struct {
		store    string
		wantFail []string
		wantSkip []string // nil: optional, the checks of the options not given
		wantLog  []string // lines the suite must log
	}{
		// First: the longest child (its compare gaps hold each lone write
		// 20 ms), which the children below then run beside.
		{"client-compare", races, undeclared, []string{undeclaredBlobs}},
		{"memstore", nil, unaided, []string{"writefence.GetPrefix on this store falls back to Get", fallbackPaths, ownBlobs}},
		{"prefix-memstore", nil, unaided, []string{ownPrefix, ownBlobs}},
		{"parts-memstore", nil, unaided, []string{ownParts}},
		{"branded-memstore", nil, unaided, []string{ownBranded}},
		{"ignoring", concat(wrongWrites, races), undeclared, nil},
		{"reused-tokens", []string{"Tokens/AfterDelete"}, concat(skipLister, optional, skipBlobs), []string{noBlobs}},
		// A head read that names a version from before the last write
		// conflicts every push after the record was set back, and a
		// write on GetPrefix's version.
		{"stale-prefix", concat(prefix, []string{"Floor/SetBack", "GetPrefix/Token"}), nil, []string{ownPrefix}},
		{"prefix-size", concat(prefix, []string{"GetPrefix/Sizes"}), nil, []string{ownPrefix}},
		{"prefix-whole", concat(prefix, []string{"GetPrefix/Sizes"}), nil, []string{ownPrefix}},
		{"torn-reads", []string{"Get/UnderOverwrite"}, concat(skipLister, optional, skipBlobs), nil},
		{"ignoring-parts", concat(wrongWrites, races), nil, []string{ownParts}},
		{"ignoring-brand", []string{"Branded/Absent", "Branded/Changed", "Branded/Other", "Race/BrandFlip"}, nil, []string{ownBranded}},
		{"once-brand", []string{"Branded/Changed", "Race/BrandFlip"}, nil, []string{ownBranded}},
		{"brand-compare", []string{"Race/BrandFlip", "Race/Branded"}, nil, []string{ownBranded}},
		// Every subtest that looks at an error of the store's Get or
		// PutIfVersion wants a *StoreError.
		{"bare-errors", []string{"Branded/Absent", "Branded/Matching", "Branded/Other", "Canceled/Put", "Create/Existing", "Delete/Missing",
			"Errors/Conflict", "Errors/NotFound", "Floor/Deleted", "Floor/Kept", "Get/Missing", "GetPrefix/Missing", "GetPrefix/Token",
			"PutParts/MatchesPut", "Tokens/AfterDelete", "Update/Deleted", "Update/Malformed", "Update/Missing", "Update/Stale"}, undeclared, nil},
		{"keyless-errors", []string{"Errors/Conflict", "Errors/NotFound"}, undeclared, nil},
		{"lenient-tokens", []string{"Update/Malformed"}, undeclared, nil},
		{"strict-tokens", []string{"Update/Malformed"}, undeclared, nil},
		{"bare-tokens", []string{"Update/Malformed"}, undeclared, nil},
		{"list-outside", []string{"Lister/Prefix"}, undeclared, nil},
		{"list-twice", []string{"Lister/Prefix"}, undeclared, nil},
		{"list-deleted", []string{"Lister/Prefix"}, undeclared, nil},
		{"list-nostop", []string{"Lister/Stop"}, undeclared, nil},
		{"list-nocancel", []string{"Lister/Canceled"}, undeclared, nil},
		{"limit-memstore", nil, concat(skipDamage, unaided), []string{ownPrefix}},
		{"limit-ignored", []string{"Get/TooLarge"}, concat(skipDamage, unaided), []string{ownPrefix}},
		{"limit-prefix", []string{"Get/TooLarge"}, concat(skipDamage, unaided), []string{ownPrefix}},
		{"limit-off-by-one", []string{"Get/TooLarge", "GetPrefix/Sizes", "Payload/1MiB"}, concat(skipDamage, unaided), []string{ownPrefix}},
		// Without Options.ReadLimit the kit learns the limit from the
		// store's ErrTooLarge and checks it there.
		{"limit-learned", nil, concat(skipDamage, unaided), []string{ownPrefix, learnedLimit}},
		{"sized-memstore", nil, concat(skipDamage, skipBlobs, unaided), []string{learnedLimit}},
		{"sized-lands", []string{"Get/TooLarge"}, concat(skipDamage, skipBlobs, unaided), nil},
		{"sized-bare", []string{"Get/TooLarge"}, concat(skipDamage, skipBlobs, unaided), []string{learnedLimit}},
		{"sealed", nil, concat(skipLister, skipLimit, skipBlobs, unaided), []string{ownPrefix}},
		{"sealed-unchecked", []string{"Damage/Empty", "Damage/Flip", "Damage/Middle", "Damage/Twice"}, concat(skipLister, skipLimit, skipBlobs, unaided), nil},
		// Damage/Middle lets a write over damage beyond a bounded check land.
		{"sealed-write-unchecked", []string{"Damage/Empty", "Damage/Flip", "Damage/Twice", "Settle/AboveDamage", "Settle/RepeatDamage"}, concat(skipLister, skipLimit, skipBlobs, unaided), nil},
		{"sealed-prefix-unchecked", []string{"Damage/Empty", "Damage/Flip", "Damage/Middle", "Damage/Twice"}, concat(skipLister, skipLimit, skipBlobs, unaided), nil},
		{"sealed-once", []string{"Damage/Twice", "Settle/RepeatDamage"}, concat(skipLister, skipLimit, skipBlobs, unaided), nil},
		{"sealed-constant", []string{"Damage/Flip"}, concat(skipLister, skipLimit, skipBlobs, unaided), nil},
		// Inspect reads a damaged record's epoch from the head a store's
		// *writefence.CorruptError carries; without it a settle below the
		// record's epoch cannot be refused as stale.
		{"sealed-headless", []string{"Settle/AboveDamage"}, concat(skipLister, skipLimit, skipBlobs, unaided), nil},
		// Every check deletes its keys when it ends, some of them never
		// written: a Delete that refuses a missing key fails each of those.
		{"delete-strict", []string{"Branded/Absent", "Branded/Changed", "Branded/Matching", "Canceled/Put", "Delete/Missing",
			"Errors/Conflict", "Errors/NotFound", "Floor/Check", "Floor/Deleted", "Floor/SetBack", "Get/Missing", "GetPrefix/Missing", "Lister/Prefix", "PutParts/MatchesPut",
			"Tokens/AfterDelete", "Update/Deleted", "Update/Malformed", "Update/Missing"}, undeclared, nil},
		{"wired-memstore", nil, concat(skipDamage, skipLimit, skipWrap), []string{ownPrefix}},
		{"wired-whole", []string{"Fence/Reads"}, concat(skipDamage, skipLimit, skipWrap), []string{ownPrefix}},
		{"wrap-memstore", nil, concat(skipDamage, skipLimit, skipWire), nil},
		{"wrap-declared", []string{"Fence/Overrides"}, concat(skipDamage, skipLimit, skipWire), nil},
		{"blob-memstore", nil, nil, []string{ownBlobs}},
		{"blob-replace", nil, nil, []string{ownBlobs, replacedBlobs}},
		{"blob-compare", []string{"Race/CreateBlob"}, nil, nil},
		{"blob-conflict-lies", []string{"Blobs/CreateOnly", "Blobs/WriteBlob", "Race/CreateBlob"}, nil, nil},
		{"blob-in-place", []string{"Blobs/CreateOnly", "Blobs/WriteBlob", "Race/CreateBlob"}, nil, nil},
		{"blob-partial", []string{"Blobs/FailingReader", "Blobs/WriteBlob"}, nil, nil},
		{"blob-lost-part", []string{"Blobs/Fence", "Blobs/RoundTrip", "Blobs/WriteBlob"}, nil, nil},
		{"blob-undated", []string{"Blobs/Collect", "Blobs/List", "Blobs/ListConsistent", "Blobs/RoundTrip", "Blobs/StatBlobs", "Blobs/WriteBlob"}, nil, nil},
		{"blob-backwards", []string{"Blobs/Clock", "Blobs/Collect"}, nil, nil},
		{"blob-bare-errors", []string{"Blobs/CreateOnly", "Blobs/Missing"}, nil, nil},
		{"blob-delete-strict", []string{"Blobs/DeleteBlobs", "Blobs/Missing"}, nil, nil},
		{"blob-delete-noop", []string{"Blobs/Collect", "Blobs/Delete", "Blobs/DeleteBlobs", "Blobs/List", "Blobs/ListConsistent", "Blobs/StatBlobs"}, nil, nil},
		{"blob-unescaping", []string{"Blobs/Fence"}, nil, nil},
		{"blob-list-misses", []string{"Blobs/Collect", "Blobs/List", "Blobs/ListConsistent"}, nil, nil},
		{"blob-list-twice", []string{"Blobs/Collect", "Blobs/List", "Blobs/ListConsistent"}, nil, nil},
		{"blob-list-outside", []string{"Blobs/Collect", "Blobs/List", "Blobs/ListConsistent"}, nil, nil},
		{"blob-list-undated", []string{"Blobs/Collect", "Blobs/List", "Blobs/ListConsistent", "Blobs/StatBlobs"}, nil, nil},
		{"blob-list-nostop", []string{"Blobs/List", "Blobs/ListConsistent"}, nil, nil},
		{"blob-list-nocancel", []string{"Blobs/List", "Blobs/ListConsistent"}, nil, nil},
		{"blob-list-lags", []string{"Blobs/ListConsistent"}, nil, nil},
		// A commit lists up to 2,000 blobs, and Collect deletes up to
		// 10,000 in one DeleteBlobs: more than one request of S3.
		{"blob-list-one-page", []string{"Blobs/ListConsistent"}, nil, nil},
		{"blob-list-from-start", []string{"Blobs/ListConsistent"}, nil, nil},
		{"blob-list-from-after", []string{"Blobs/ListConsistent"}, nil, nil},
		{"blob-delete-one-batch", []string{"Blobs/DeleteBlobs"}, nil, nil},
		{"blob-write-first-part", []string{"Blobs/Fence", "Blobs/WriteBlob"}, nil, nil},
	}
	// The children spend much of their time waiting (on the suite's
	// barriers and compare gaps), so they run twice as many at once as
	// there are CPUs, whatever -parallel says; each subtest checks its
	// child's output.
	stores := make([]string, len(tests))
	for i, tt := range tests {
		stores[i] = tt.store
	}
	done := runChildren(t, "TestHelperBroken", brokenEnv, "5m", stores, 2*runtime.GOMAXPROCS(0))
	for i, tt := range tests {
		t.Run(tt.store, func(t *testing.T) {
			if slices.Contains(tt.wantFail, "Get/UnderOverwrite") {
				assert.True(t, fullReads[tt.store], "%s fails Get/UnderOverwrite, which must read the default count on it (fullReads)", tt.store)
			}
			c := <-done[i]
			out, err := c.out, c.err

			for _, m := range raceSummary.FindAll(out, -1) {
				t.Logf("%s: %s", tt.store, m)
			}
			wantSkip := tt.wantSkip
			if wantSkip == nil {
				wantSkip = optional
			}
			assert.Equal(t, sorted(wantSkip), subtests(skippedSubtest, out), "skipped subtests on %s", tt.store)
			for _, line := range tt.wantLog {
				assert.Contains(t, string(out), line, "the suite did not log which method it checks")
			}
			if len(tt.wantFail) == 0 {
				require.NoError(t, err, "the suite failed on %s:\n%s", tt.store, out)
				return
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite passed on %s:\n%s", tt.store, out)
			require.NotZero(t, exit.ExitCode())
			failed := subtests(failedSubtest, out)
			assert.Equal(t, sorted(tt.wantFail), failed, "failing subtests on %s; child output:\n%s", tt.store, tailLines(out, 60))
			t.Logf("%s: failed %s", tt.store, strings.Join(failed, ", "))
		})
	}
}

// subtests returns the sorted names re matches in out.
func subtests(re *regexp.Regexp, out []byte) []string {
	names := []string{}
	for _, m := range re.FindAllSubmatch(out, -1) {
		names = append(names, string(m[1]))
	}
	slices.Sort(names)
	return names
}

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// sorted returns a sorted copy of names, never nil.
func sorted(names []string) []string {
	c := append([]string{}, names...)
	slices.Sort(c)
	return c
}

// tailLines returns the last n lines of out, enough to explain a mismatch
// without flooding the log.
func tailLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
