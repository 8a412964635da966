package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// storeFlags are the flags every command that opens a store shares.
type storeFlags struct {
	inv     *invocation // told the address and timeout, for error advice
	addr    string
	prefix  string
	timeout time.Duration
	json    bool
	create  bool   // -create, on the commands that write (addCreateFlag)
	blobs   string // -blobs, on the commands that touch blobs (addBlobsFlag)
	audit   bool   // doctor: a store too few replicas confirm is a finding, not a refusal
}

// defaultTimeout is the default -timeout of a command that makes a few
// requests.
const defaultTimeout = time.Minute

// addStoreFlags adds -store, -prefix, -timeout and -json to fs. The global
// -store, when given, is the default.
func addStoreFlags(fs *flag.FlagSet, inv *invocation, timeout time.Duration) *storeFlags {
	sf := &storeFlags{inv: inv}
	fs.StringVar(&sf.addr, "store", inv.store, "store `address` (default $WRITEFENCE_STORE, else the state directory)")
	fs.Var((*prefixValue)(&sf.prefix), "prefix", "key `prefix`, a directory: myapp means myapp/ (default "+keys.DefaultPrefix+")")
	sf.timeout = timeout
	fs.Var((*durationValue)(&sf.timeout), "timeout", "give up after this `duration`, such as 30s or 5m (0: never)")
	fs.BoolVar(&sf.json, "json", false, "print JSON on stdout, one object per line")
	return sf
}

// names are what a command hands the library that the library refuses,
// as an invalid argument, before any I/O. check refuses them before the
// store is opened, so that a usage error (exit 2) reads and writes
// nothing, not even the store -create would create.
type names struct {
	prefix, identity string
	writers          []string    // writers and holders
	shards           [][2]string // plugin and shard
	leases           []string
	blobs            bool // the writers write blobs of the shards
}

func (n names) check() error {
	if len(n.identity) > record.MaxIdentityLen {
		return invalidArg("identity", fmt.Sprintf("%d bytes, more than %d", len(n.identity), record.MaxIdentityLen))
	}
	if err := keys.CheckPrefix(n.prefix); err != nil {
		return keyArg(err)
	}
	for _, w := range n.writers {
		if len(w) > record.MaxWriterLen {
			return invalidArg("writer", fmt.Sprintf("%d bytes, more than %d", len(w), record.MaxWriterLen))
		}
	}
	for _, s := range n.shards {
		if _, err := keys.Shard(n.prefix, s[0], s[1]); err != nil {
			return keyArg(err)
		}
		for _, w := range n.writers {
			if !n.blobs {
				break
			}
			// The longest name blob put gives a blob of w must fit a key.
			if _, err := keys.Blob(n.prefix, s[0], s[1], keys.BlobName(math.MaxUint64, w, strings.Repeat("0", 32))); err != nil {
				return keyArg(err)
			}
		}
	}
	for _, l := range n.leases {
		if _, err := keys.Lease(n.prefix, l); err != nil {
			return keyArg(err)
		}
	}
	return nil
}

func invalidArg(arg, reason string) error {
	return &writefence.InvalidArgumentError{Arg: arg, Reason: reason}
}

// keyArg is the invalid argument of a *keys.Error.
func keyArg(err error) error {
	var ke *keys.Error
	if errors.As(err, &ke) {
		return invalidArg(ke.Arg, ke.Reason)
	}
	return err
}

// prefixOf is the key prefix a -prefix value means.
func prefixOf(prefix string) string {
	if prefix == "" {
		return keys.DefaultPrefix
	}
	return prefix
}

// prefixValue is -prefix. The prefix names a directory of keys, so one
// given without a trailing "/" gets one: -prefix myapp writes under
// myapp/s/..., never under myapps/.... A prefix that ends in "/" is kept
// as given, and an empty one leaves the default. One the library refuses
// (keys.CheckPrefix: it would reach into another prefix's keys) is
// refused here, before any command reads or writes under it.
type prefixValue string

func (p *prefixValue) String() string { return string(*p) }

func (p *prefixValue) Set(s string) error {
	if s != "" && !strings.HasSuffix(s, "/") {
		s += "/"
	}
	var ke *keys.Error
	if err := keys.CheckPrefix(s); errors.As(err, &ke) {
		return errors.New(ke.Reason)
	} else if err != nil {
		return err
	}
	*p = prefixValue(s)
	return nil
}

// opened is an open store and what releases its client.
type opened struct {
	store writefence.ConditionalStore
	addr  string // the address as given; openStore refuses one with credentials
	close func() error
	audit auditor // reads the store's own settings for doctor; nil when it has none to read

	// ready, when set, tells before the command's first request whether
	// the store answers and exists: a bucket, table, container or
	// directory that does not exist is a *missingError (see prepare).
	ready func(ctx context.Context) error
	// create, when set, creates the bucket, table, container or directory
	// the store needs; one that exists already is not an error. Nil: the
	// store needs nothing created.
	create func(ctx context.Context) error

	// blobs is the store of the blobs, from -blobs; nil: the same store.
	blobs writefence.ConditionalStore

	// opts are the settings the address gave the store.
	opts writefence.StoreOptions
}

// output is where the command reports, as -json asks.
func (sf *storeFlags) output() *output { return &output{inv: sf.inv, json: sf.json} }

// withStore opens the store (the default when -store is empty), runs use
// on it with ctx bounded by -timeout, closes it and returns use's exit
// status; a store that does not open fails the command through o. With
// readOnly the store is opened for a command that only reads: it creates
// nothing and needs no write permission. Before use runs, prepare checks
// that the store answers and exists, and opens -blobs: a directory that
// holds no store, or a missing bucket, table or container, is an error
// unless the command writes and -create was given, which creates it.
func (sf *storeFlags) withStore(ctx context.Context, o *output, readOnly bool, use func(ctx context.Context, s *opened) int) int {
	ctx, cancel, addr, err := sf.begin(ctx)
	defer cancel()
	if err != nil {
		return o.fail(err)
	}
	s, err := openStoreMode(ctx, addr, readOnly)
	if err != nil {
		return o.fail(err)
	}
	defer s.close()
	sf.inv.addr = addr
	b, err := sf.prepare(ctx, s, readOnly)
	if b != nil {
		defer b.close()
	}
	if err != nil {
		return o.fail(err)
	}
	return use(ctx, s)
}

// begin returns ctx bounded by -timeout, the function that releases it,
// and the store's address (the default when -store is empty).
func (sf *storeFlags) begin(ctx context.Context) (context.Context, context.CancelFunc, string, error) {
	cancel := context.CancelFunc(func() {})
	if sf.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, sf.timeout)
	}
	sf.inv.timeout = sf.timeout
	addr, err := storeAddress(sf.addr)
	return ctx, cancel, addr, err
}

// storeAddress returns addr, or the default address when addr is empty.
func storeAddress(addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	if env := os.Getenv("WRITEFENCE_STORE"); env != "" {
		return env, nil
	}
	dir, err := defaultDir()
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: dir}).String(), nil
}

// defaultDir is the persistent default store: the XDG state directory,
// because records are state that should outlive a reboot, unlike a cache.
func defaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "writefence"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("writefence: no default store: %w; pass -store", err)
	}
	return filepath.Join(home, ".local", "state", "writefence"), nil
}

// openers maps an address scheme to what opens it. The stores of SDKs add
// their schemes from store_<name>.go, each file left out of the build by
// its tag (omitted says which); tests add their own.
var openers = map[string]func(ctx context.Context, u *url.URL) (*opened, error){
	"mem":  openMem,
	"file": openFile,
}

// omitted maps a scheme whose store was left out of the build to the tag
// that left it out. Each tag's store_<name>_omitted.go, built only with
// the tag or writefence_nosdk, fills it.
var omitted = map[string]string{}

// omittedBy is writefence_nosdk when that tag left out every store of an
// SDK (store_nosdk.go), and names it in place of each store's tag.
var omittedBy string

// userInAddress holds the schemes whose addresses may name a user (never
// a password): a user name is no secret, and PostgreSQL's URLs carry one.
var userInAddress = map[string]bool{}

// readOpeners maps a scheme whose read-only open differs to it.
var readOpeners = map[string]func(ctx context.Context, u *url.URL) (*opened, error){
	"file": openFileRead,
}

// openStore opens the store addr names for writing.
func openStore(ctx context.Context, addr string) (*opened, error) {
	return openStoreMode(ctx, addr, false)
}

// openStoreMode opens the store addr names, for reading only when
// readOnly is set. A malformed address is a usageError, reported without
// echoing the address: it may hold a secret typed by mistake.
func openStoreMode(ctx context.Context, addr string, readOnly bool) (*opened, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, usagef("writefence: store address: cannot parse it as a URL")
	}
	// An address names one store, whatever this build holds: a fragment
	// would be dropped (the directory of file:///data/wf#2 would be
	// /data/wf), a parameter given twice read as its first value only,
	// and one without a value (wait=$REPLICAS, the variable unset) as if
	// it were left out.
	if u.Fragment != "" || strings.HasSuffix(addr, "#") {
		return nil, usagef("writefence: store address: a fragment (#...) names no store; write a # in a path as %%23")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, usagef("writefence: store address: cannot parse its parameters")
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		switch {
		case len(q[k]) > 1:
			return nil, usagef("writefence: store address: parameter %q given %d times: give it once", escape.String(k), len(q[k]))
		case q[k][0] == "":
			return nil, usagef("writefence: store address: parameter %q has no value: give one, or leave the parameter out", escape.String(k))
		}
	}
	if tag, off := omitted[u.Scheme]; off {
		return nil, usagef("writefence: store address: %s:// is not in this build (built with %s)", u.Scheme, cmp.Or(omittedBy, tag))
	}
	if _, hasPassword := u.User.Password(); u.User != nil && (hasPassword || !userInAddress[u.Scheme]) {
		return nil, usagef("writefence: store address: credentials are not accepted in the address; set them in the environment (writefence help stores)")
	}
	open, ok := openers[u.Scheme]
	if ro, has := readOpeners[u.Scheme]; has && readOnly {
		open = ro
	}
	if !ok {
		return nil, usagef("writefence: store address: unknown scheme %q (want one of %s)", escape.String(u.Scheme), strings.Join(slices.Sorted(maps.Keys(openers)), ", "))
	}
	s, err := open(ctx, u)
	if err != nil {
		return nil, err
	}
	s.addr = addr
	return s, nil
}

// query returns the address's query, refusing parameters not in allowed
// so that a misspelt one is not silently ignored.
//
//lint:ignore U1000 the stores' files use it, and a build may leave them all out
func query(u *url.URL, allowed ...string) (url.Values, error) {
	q := u.Query()
	for k := range q {
		if !slices.Contains(allowed, k) {
			return nil, usagef("writefence: store address: %s:// takes no parameter %q", u.Scheme, escape.String(k))
		}
	}
	return q, nil
}

// storeName reads an address of the form scheme://name[?params]: its
// query, refusing parameters not in allowed, and the bucket, table or
// container (what) its host names, refusing an address without one or
// with a path (form is the address's form, for the refusal), and a name
// that valid refuses, with valid's reason.
//
//lint:ignore U1000 as query
func storeName(u *url.URL, what, form string, valid func(name string) error, allowed ...string) (string, url.Values, error) {
	q, err := query(u, allowed...)
	if err != nil {
		return "", nil, err
	}
	name := u.Host
	if name == "" || strings.Trim(u.Path, "/") != "" {
		return "", nil, usagef("writefence: store address: want %s, the %s as the host and no path", form, what)
	}
	if err := valid(name); err != nil {
		return "", nil, usagef("writefence: store address: %s %s: %v", what, escape.String(name), err)
	}
	return name, q, nil
}

// boolParam reads the parameter name of q as true or false, def when it
// is absent.
//
//lint:ignore U1000 as query
func boolParam(q url.Values, name string, def bool) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, usagef("writefence: store address: %s=%s: want true or false", name, escape.String(v))
	}
	return b, nil
}

func noClose() error { return nil }

func openMem(_ context.Context, u *url.URL) (*opened, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, usagef("writefence: store address: mem:// takes no host, path or parameters")
	}
	return &opened{store: &writefence.MemStore{}, close: noClose}, nil
}
