//go:build !writefence_novalkey && !writefence_nosdk

package writefence

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// The layout of a value: a fixed header, then the data.
const (
	valkeyMagic      = "WFV2" // the layout; no value of the first layout starts so
	valkeyDigestOff  = 4      // the head digest, 40 hex digits
	valkeyTokenOff   = 44     // the version token, 32 hex digits
	valkeyLengthOff  = 76     // the data's length, 16 hex digits
	valkeyCRCOff     = 92     // the data's CRC-32C, 8 hex digits
	valkeyHeaderLen  = 100    // what precedes the data
	valkeyVersionLen = 32     // a version token: 128 random bits in hex

	// valkeyHeadEnd ends the head, the header and the data's first 3800
	// bytes, and valkeyTailLen is the length of the tail, the value's last
	// bytes past the head: the head digest covers both (the head from
	// valkeyTokenOff on). Every write and every GetPrefix reads and checks
	// them and the value's length, and no more of what they replace: 4000
	// bytes, the whole of a value up to that size.
	valkeyHeadEnd = 3900
	valkeyTailLen = 100
)

// The first layout, read and replaced on write: the SHA-1 of the rest in
// hex, the version token, the data.
const (
	valkeyFirstDigestLen = 40
	valkeyFirstHeaderLen = valkeyFirstDigestLen + valkeyVersionLen
)

// valkeyDamagedPrefix starts the version of a damaged value; the SHA-1 of
// the whole value as found follows it in lower-case hex. No token of an
// intact value has this form.
const valkeyDamagedPrefix = "damaged-"

// valkeyStagedTTL bounds the life of a value staged by the Script path
// whose script never ran (the connection was lost in between): the script
// moves or deletes it at once otherwise.
const valkeyStagedTTL = 10 * time.Minute

// valkeyInlineMax is the size of the largest value the Script path sends
// in the script's call rather than staging it: 2 KiB of data. Beyond about
// 3 KiB its bytes cost the server more in Lua than the staging SET, RENAME
// and PERSIST do (BENCHMARKS.md).
const valkeyInlineMax = valkeyHeaderLen + 2<<10

// valkeyStagedTTLMillis is valkeyStagedTTL in milliseconds, boxed once for
// every staging SET.
var valkeyStagedTTLMillis any = valkeyStagedTTL.Milliseconds()

// valkeyDefaultWaitTimeout is the bound of a WAIT when WaitTimeout is zero.
const valkeyDefaultWaitTimeout = time.Second

// valkeyUnwatchTimeout bounds the UNWATCH sent after a transaction that did
// not reach EXEC, so a caller's cancelled ctx cannot leave a WATCH armed.
const valkeyUnwatchTimeout = 5 * time.Second

// valkeyMaxRedirects bounds the cluster redirections (MOVED, ASK), busy
// answers (TRYAGAIN, CLUSTERDOWN) and transactions aborted by a migration
// one call follows.
const valkeyMaxRedirects = 16

// valkeyStore is a ConditionalStore over Valkey or Redis: one
// standalone server (a primary, with replicas and failover when
// WaitReplicas is set; see Durability), or a cluster through a
// *redis.ClusterClient (see Cluster).
//
// Layout: each key holds a plain string, a header of 100 bytes and then
// the data:
//
//	offset size field
//	0      4    "WFV2", the layout
//	4      40   the head digest: the SHA-1, in lower-case hex, of the
//	            value's bytes from offset 44 to 3900 (or to its end),
//	            then of its last 100 bytes past those
//	44     32   the version token: 128 bits from crypto/rand in
//	            lower-case hex, drawn afresh for every write, so that it
//	            never names two contents
//	76     16   the length of the data, in lower-case hex
//	92     8    the CRC-32C of the data, in lower-case hex
//	100         the data
//
// The first 3900 bytes of a value, its head, are the header and the first
// 3800 bytes of the data, and its last 100 bytes past the head are its
// tail: the head digest covers both, the length field tells the value's
// length, and the CRC-32C covers the data whole. A value of up to 4000
// bytes is all head and tail. With valkey-cli:
//
//	GETRANGE <key> 44 75   # the version token
//	GETRANGE <key> 100 -1  # the data
//	STRLEN <key>           # 100 + the size of the data
//
// A string layout, rather than a hash, lets a read be bounded on the
// server: one GETRANGE returns at most MaxObjectSize+101 bytes, however
// large the stored value is. A key holding another type is never read or
// overwritten: the server's WRONGTYPE error is returned wrapped, matching
// errors.ErrUnsupported and neither ErrNotFound nor ErrConflict.
//
// Values of the first layout (a 40-character SHA-1 of the rest, the
// token, the data, and no "WFV2"), written by earlier releases, are read
// and checked whole as before, and the first write conditioned on one
// replaces it with a value of this layout, once it has checked the old
// value whole: the WATCH path reads it, the script hashes it on the
// server. So a store keeps working across the upgrade without a step of
// its own, and each key pays the first layout's cost once. A writer of an
// earlier release finds a value of this layout damaged and refuses to
// overwrite it: mixed releases fail closed, never overwrite each other
// unseen.
//
// Damage in place: the version lives beside the bytes, so a value edited
// by hand (SETRANGE, APPEND, a SET by an operator or another program) keeps
// the token a fence may remember. Each call therefore checks what it
// reads, and a value that fails is reported as a *CorruptError
// (ErrCorrupt) whose Check says what failed and whose Version is
// "damaged-" followed by the SHA-1 of the whole value as found: it names
// exactly those bytes and no intact value. What each call checks:
//
//   - Get reads the whole value and checks all of it: the head against
//     its digest, the length, and the data against its CRC-32C.
//   - GetPrefix and every write (PutIfVersion, PutPartsIfVersion,
//     PutIfBranded) read the head, the tail and the length, and no more:
//     damage to the header, to the data's first 3800 bytes or to its last
//     100, and any change of the value's length (APPEND, SETRANGE past the
//     end, a truncation, a SET of other bytes), is reported as Get reports
//     it, and a write over it writes nothing, whatever version it expects.
//     A record's header is within the head, so every decision a Fence
//     makes is made on checked bytes; a value of up to 4000 bytes is
//     checked whole.
//   - Damage between the head and the tail that keeps the length (a
//     SETRANGE in the middle of a larger value) is found by Get, and by
//     GetPrefix when it reads the value whole; a GetPrefix of fewer bytes
//     returns the version from before the damage (and the bytes beyond the
//     head as they are), and a write conditioned on that version replaces
//     the damaged value. This is what ConditionalStore allows a store
//     whose writes check a bounded part of what they replace: the write
//     was decided on intact bytes (a version the writer read or wrote
//     itself) and replaces the data whole, so no decision rests on the
//     damaged bytes, which reach a reader of the whole value only as a
//     *CorruptError. The damage goes unreported if nothing reads the whole
//     value (Get: Fence.Latest, Fence.Update) before that write.
//   - A write conditioned on the version of damaged bytes (Fence.Settle)
//     reads the whole value (the script hashes it on the server) and
//     replaces it if and only if it is still exactly those bytes, decided
//     in the write's atomic step.
//
// A value larger than MaxObjectSize cannot be checked within the read
// limit: Get, GetPrefix and the writes refuse it with an error matching
// ErrTooLarge, having read no more than the limit.
//
// Writes: PutIfVersion is WATCH, a read of the head and the tail, MULTI,
// SET, EXEC on one dedicated connection, in two round trips; or, with
// Script set, one round trip of one Lua script that checks the current
// value (and the brand) and writes the new one. A value of up to 2 KiB of
// data travels in the script's call and is SET by the script; a larger one
// is sent in the same round trip as a SET under a staging key of its own,
// "writefence/_put/{tag}" followed by the new token, which the script
// renames onto the key, or deletes, so that its bytes never enter Lua.
// Both paths give the same results and the same errors, and on both the
// server's work per write is the check of a head and a tail plus what a
// plain SET of the value costs: neither hashes nor transfers the value it
// replaces (BENCHMARKS.md). A staged value whose script never ran (the
// connection was lost in between) expires after ten minutes. The client
// sends a write's script once, never again after a failure that may have
// reached the server (see NewValkeyConditionalStore), so on a standalone
// server without WaitReplicas it needs no connection of its own and runs
// on the client's pool.
//
// Why the head digest is a SHA-1: the Script path checks it in the
// server, and the only digest a Valkey script has is redis.sha1hex. A
// CRC-32C written in Lua costs the server some 30 times the whole check
// over the same 1 KiB (159 µs against 5), and a check of the header alone
// would let a write replace data edited in place under an intact header
// unseen. Over the bytes it covers the SHA-1 finds any edit, accidental
// or by hand, short of a deliberate collision; the CRC-32C of the data
// finds, on a read of the whole value, any edit of a single run of up to
// 32 bits and any other with a chance of 1 in 2^32 of missing it. A 1 KiB
// write's check costs the server about 4 µs, half of it taking the head's
// bytes into Lua and half the SHA-1 (BENCHMARKS.md).
//
// Brand: PutIfBranded (BrandedPutter) reads the brand key inside the
// write's own atomic step, WATCHed with the data key and checked before
// MULTI/EXEC, or inside the script, so no write lands while the brand is
// foreign. The brand key must hold an intact value of this store, as a
// Brand over this store writes it.
//
// Cluster: over a *redis.ClusterClient every call works on the primary
// that owns the key's hash slot, and every transaction or script touches
// keys of that slot only: the key, and the keys written beside it (the
// staging key and, with WaitReplicas, the replication sync key), which are
// tagged with the key's slot. The keys a Fence builds have no hash tag of
// their own, so a shard's record and everything written beside it are in
// one slot, and different shards spread over the cluster. Resharding is
// followed, never reported as a conflict: a MOVED redirection goes to the
// slot's new owner, an ASK to the node importing the slot (after ASKING),
// a TRYAGAIN or CLUSTERDOWN answer is tried again after a pause, and a
// transaction whose WATCH a migration of the key aborted (MIGRATE deletes
// the key from the source) runs again where the key now is, deciding
// afresh; at most sixteen of these per call. While the key is still on a
// source whose slot migrates, the Script path cannot make its staging key
// there (the node sends new keys to the target), so that write takes the
// WATCH path, on the node that holds the key; a read with WaitReplicas
// whose slot's sync key does not exist yet waits, within the same bound,
// for the key to move. A redirection answers a
// command that did nothing, so a write that follows one is that write's
// only execution: a push during a migration lands once, on one node, or
// not at all. BrandVerifyAlways stays atomic where it is offered:
// PutIfBranded checks the brand in the write when the brand key shares
// the key's slot, as every key does under a prefix holding a hash tag
// ("{app}/", which puts the whole store in one slot, on one primary); for
// a key in another slot it refuses, before any I/O, with a *StoreError
// matching errors.ErrUnsupported, because no atomic step spans two slots.
// BrandVerify and BrandClaim, which check the brand key itself, work with
// any prefix. WAIT runs on the primary that owns the slot, on the write's
// own connection, and counts that primary's replicas. List scans every
// primary.
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
// is exactly its own push: Get and GetPrefix write the replication sync
// key ("writefence/_wait", on a cluster "writefence/_wait{tag}" in the
// key's slot) in the same atomic step as their read and WAIT for that
// write, so the replicas that acknowledge it hold everything the read saw
// (the replication stream is ordered); when they cannot be confirmed they
// return an error matching ErrOutcomeUnknown, whatever they read. A retry
// therefore does not return nil until the replicas hold the record. Each
// WaitReplicas call costs one more round trip (the WAIT) and the replicas'
// acknowledgement time.
//
// What the caller must configure for failover (Sentinel, a cluster, or by
// hand): at least WaitReplicas replicas attached to each primary (with
// fewer, every call fails with ErrOutcomeUnknown), and a failover that
// promotes a replica holding every acknowledged write. WAIT counts any
// WaitReplicas replicas, so either set WaitReplicas to the number of
// replicas that can be promoted, or let failover pick the replica with the
// highest replication offset (Sentinel does, among replicas of equal
// replica-priority; a cluster ranks its replicas by offset, and CLUSTER
// FAILOVER on the chosen replica waits for it to catch up). A WAIT counts
// copies in the replicas' memory: losing the primary and those replicas at
// once loses the write unless they persist it. Without WaitReplicas only a
// single server without failover keeps the fence's guarantee, and then
// only as far as its own persistence (appendonly, appendfsync) does.
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
type valkeyStore struct {
	// MaxObjectSize is the read limit in bytes, not counting the header;
	// zero (or less) means the default, 64 MiB for the largest default
	// payload plus 4 KiB for a record header.
	MaxObjectSize int64

	// Script selects the one-round-trip path for PutIfVersion and
	// PutIfBranded: the value is SET under a staging key and a Lua
	// script, sent with it and run with EVALSHA (EVAL, one more round
	// trip, when the server's script cache does not hold it), checks and
	// moves it onto the key. False means WATCH/MULTI/EXEC. Reads are the
	// same either way. Script needs EVAL and EVALSHA to be allowed (ACL
	// +@scripting), and the staging keys (see NewValkeyConditionalStore).
	Script bool

	// WaitReplicas, when above zero, is the number of replicas that must
	// acknowledge a write before PutIfVersion reports it landed, and that
	// must confirm what Get and GetPrefix read before they return it; see
	// Durability. Fewer, or a failing WAIT, returns an error matching
	// ErrOutcomeUnknown. The ACL user then also needs WAIT, and SET on the
	// replication sync key. Zero (or less) means no WAIT.
	WaitReplicas int

	// WaitTimeout bounds each WAIT; zero (or less) means one second. It is
	// cut to ctx's deadline and rounded up to whole milliseconds (WAIT with
	// 0 would block for ever), so every call ends.
	WaitTimeout time.Duration

	client  redis.UniversalClient
	cluster *redis.ClusterClient // client, when it is a cluster client

	served  atomic.Bool // set once the server was found to be one this store serves
	checkMu sync.Mutex  // serializes the check until it succeeds
}

var _ ConditionalStore = (*valkeyStore)(nil)

var _ Capable = (*valkeyStore)(nil)

// Capabilities implements Capable: the store's PrefixReader, PartsPutter
// and BrandedPutter are its own.
func (s *valkeyStore) Capabilities() ConditionalStore { return s }

// NewValkeyConditionalStore returns a store that keeps its objects, at the
// keys given, in the Valkey 7+ or Redis 6+ server client talks to (in its
// selected database) or in the cluster of a *redis.ClusterClient. With
// replicas and failover, set StoreOptions.WaitReplicas. A *redis.Ring, and
// a standalone client of a cluster node, are refused: until INFO cluster
// reports cluster_enabled:0, every call returns, touching no key, a
// *StoreError matching errors.ErrUnsupported (fs.ErrPermission when the ACL
// refuses INFO); a failure to reach the server or a passing state (LOADING,
// BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY, NOREPLICAS, too many
// clients) is transient.
//
// The ACL user needs INFO, and EXISTS, STRLEN, GETRANGE, SET, DEL, SCAN,
// WATCH, UNWATCH, MULTI and EXEC on the keys; with Script, EVAL, EVALSHA,
// GET and EXISTS, and SET, UNLINK, RENAME and PERSIST on "writefence/_put/*";
// with WaitReplicas, WAIT and SET on "writefence/_wait" (on a cluster
// "writefence/_wait{*}"); on a cluster, CLUSTER SLOTS.
//
// Reads retry as the client's options say (MaxRetries); a write is never
// sent again once it may have reached the server (a retry could report a
// conflict for a write that landed), so a lost reply is the client's error.
func NewValkeyConditionalStore(client redis.UniversalClient, opts *StoreOptions) ConditionalStore {
	return newValkeyStore(client, opts)
}

func newValkeyStore(client redis.UniversalClient, opts *StoreOptions) *valkeyStore {
	s := &valkeyStore{client: client}
	s.cluster, _ = client.(*redis.ClusterClient)
	if opts != nil {
		s.MaxObjectSize, s.Script = opts.MaxObjectSize, opts.Script
		s.WaitReplicas, s.WaitTimeout = opts.WaitReplicas, opts.WaitTimeout
	}
	return s
}

func (s *valkeyStore) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaultMaxObjectSize
}

// checkServer refuses a server the store does not serve before any key is
// touched; op and key are those of the call that asks. A success is
// remembered; a failure, transient or not, is checked afresh next time.
func (s *valkeyStore) checkServer(ctx context.Context, op, key string) error {
	if s.served.Load() {
		return nil
	}
	s.checkMu.Lock()
	defer s.checkMu.Unlock()
	if s.served.Load() {
		return nil
	}
	unsupported := func(reason string) error {
		return storeErr("valkey "+op, key, errors.ErrUnsupported,
			errors.New("a standalone server or a *redis.ClusterClient is required: "+reason))
	}
	switch s.client.(type) {
	case *redis.ClusterClient:
		s.served.Store(true)
		return nil
	case *redis.Ring:
		return unsupported("the client is a *redis.Ring, which shards keys across servers")
	}
	info, err := s.client.Info(ctx, "cluster").Result()
	if err != nil && valkeyNoInfo(err) {
		return storeErr("valkey "+op, key, errors.ErrUnsupported, fmt.Errorf(
			"a standalone server or a *redis.ClusterClient is required: the server answered INFO cluster with an error, so whether it runs in cluster mode is unknown: %w", err))
	}
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
		return unsupported("INFO cluster reports cluster_enabled:" + esc(enabled) + " (a cluster needs a *redis.ClusterClient)")
	}
	s.served.Store(true)
	return nil
}

// valkeyNoInfo reports whether err, the answer to INFO cluster, is the
// server's error reply saying it has no such command or section ("ERR
// unknown command", "ERR unknown section", or a code of its own): the
// server will answer the same again. It is not one for a failure to
// reach the server (no reply at all), an ACL's refusal (see valkeyError),
// or a reply that names a passing state: loading, busy, a primary or a
// cluster down, too many clients.
func valkeyNoInfo(err error) bool {
	switch valkeyErrorCode(err) {
	case "", "NOPERM", "NOAUTH", "WRONGPASS",
		"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "NOREPLICAS":
		return false
	}
	return !redis.IsMaxClientsError(err)
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

// ---- connections and cluster redirections ----

// valkeyConn is the connection a call runs on, and whether the node it
// reaches must be told ASKING before each command: an ASK redirection
// named it as the node importing the key's slot.
type valkeyConn struct {
	r      valkeyRunner // tx, or the client when the call needs no connection of its own
	tx     *redis.Tx    // the dedicated connection; nil when r is the client
	asking bool
}

// valkeyRunner sends commands: a *redis.Tx or a *redis.Client.
type valkeyRunner interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// queue adds cmd to the pipeline p, after an ASKING when the connection
// asks.
func (c valkeyConn) queue(ctx context.Context, p redis.Pipeliner, cmd redis.Cmder) {
	if c.asking {
		_ = p.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
	}
	_ = p.Process(ctx, cmd)
}

// send sends cmds in one round trip, each after an ASKING when the
// connection asks, and returns the error of the first that failed.
func (c valkeyConn) send(ctx context.Context, cmds ...redis.Cmder) error {
	if len(cmds) == 1 && !c.asking {
		return c.r.Process(ctx, cmds[0])
	}
	p := c.r.Pipeline()
	for _, cmd := range cmds {
		c.queue(ctx, p, cmd)
	}
	_, err := p.Exec(ctx)
	return err
}

// ask sends ASKING, when the connection asks, right before a MULTI: the
// flag then holds until EXEC. It costs a round trip, on the rare path of a
// slot being imported.
func (c valkeyConn) ask(ctx context.Context) error {
	if !c.asking {
		return nil
	}
	return c.tx.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
}

// onNode runs f on a connection of its own to the primary that serves key:
// the server, or on a cluster the primary that owns key's slot. On a
// cluster it follows what f returns as the answer of a command that did
// nothing: a MOVED or ASK redirection to the node it names, a TRYAGAIN or
// CLUSTERDOWN again after a pause, and an EXEC that a migration aborted
// (TxFailedErr: MIGRATE deleted a WATCHed key from the source) once more,
// so that f decides again where the key is. f must return such an answer
// only from a step that wrote nothing.
func (s *valkeyStore) onNode(ctx context.Context, op, key string, f func(c valkeyConn) error) error {
	if s.cluster == nil {
		return s.client.Watch(ctx, func(tx *redis.Tx) error { return f(valkeyConn{r: tx, tx: tx}) })
	}
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return valkeyError(op, key, err)
	}
	asking, aborts := false, 0
	for attempt := 1; ; attempt++ {
		err = node.Watch(ctx, func(tx *redis.Tx) error { return f(valkeyConn{r: tx, tx: tx, asking: asking}) })
		if err == nil || attempt >= valkeyMaxRedirects || ctx.Err() != nil {
			break
		}
		var r *valkeyRedirected
		switch {
		case errors.As(err, &r) && r.addr != "":
			if node, err = s.clusterNode(ctx, r.addr); err != nil {
				return valkeyError(op, key, err)
			}
			asking = r.code == "ASK"
		case r != nil:
			if err := valkeyPause(ctx, attempt); err != nil {
				return err
			}
		case errors.Is(err, redis.TxFailedErr) && aborts < 2:
			// A real conflict shows as one on the next read; a
			// migration's abort does not.
			aborts++
		default:
			var reply redis.Error
			if !errors.As(err, &reply) && !isContextErr(err) {
				// The node may be gone (a failover): the next call
				// routes by a fresh view of the cluster.
				s.cluster.ReloadState(ctx)
			}
			return err
		}
	}
	return err
}

// valkeyRedirected is a cluster's answer to commands it did not run, as
// onNode follows it: to the node at addr (after ASKING, when code is ASK),
// or, with no addr, to the same node after a pause.
type valkeyRedirected struct {
	code string // MOVED, ASK, TRYAGAIN or CLUSTERDOWN
	addr string
	err  error // the answer
}

func (r *valkeyRedirected) Error() string { return r.err.Error() }
func (r *valkeyRedirected) Unwrap() error { return r.err }

// valkeyRouted returns err, or, when cmds (sent together, err the error of
// their round trip) met a cluster redirection, a *valkeyRedirected for
// onNode. A MOVED speaks for the whole slot, so for key. An ASK says only
// that the command's own keys are missing on a node whose slot migrates:
// it is followed only when the command names key, for the node it names
// serves any key it is asked about (present there or not), and key may
// still be here while a new key beside it (a staging or sync key) is sent
// there. Any other ASK, a TRYAGAIN (the command's keys are split between
// the nodes) and a CLUSTERDOWN are waited out.
func valkeyRouted(key string, err error, cmds ...redis.Cmder) error {
	if err == nil {
		return nil
	}
	var found *valkeyRedirected
	for _, cmd := range append(cmds, redis.NewStatusResult("", err)) {
		code, addr := valkeyRedirection(cmd.Err())
		switch {
		case code == "":
			continue
		case code == "MOVED":
			return &valkeyRedirected{code: code, addr: addr, err: cmd.Err()}
		case code == "ASK" && slices.Contains(cmd.Args(), any(key)):
			found = &valkeyRedirected{code: code, addr: addr, err: cmd.Err()}
		case found == nil:
			found = &valkeyRedirected{code: code, err: cmd.Err()}
		}
	}
	if found == nil {
		return err
	}
	return found
}

// valkeyRedirection returns the code of the redirection err reaches, and
// the node it names (MOVED, ASK), or "" when err reaches none.
func valkeyRedirection(err error) (code, addr string) {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return "", ""
	}
	f := strings.Fields(reply.Error())
	switch {
	case len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK"):
		return f[0], f[2]
	case len(f) > 0 && (f[0] == "TRYAGAIN" || f[0] == "CLUSTERDOWN"):
		return f[0], ""
	}
	return "", ""
}

// valkeyPause waits before attempt+1 after a TRYAGAIN or CLUSTERDOWN: 1 ms,
// doubling to at most 100 ms.
func valkeyPause(ctx context.Context, attempt int) error {
	return hook.Sleep(ctx, min(time.Millisecond<<min(attempt-1, 10), 100*time.Millisecond))
}

// clusterNode returns the cluster client's client of the node at addr,
// from a fresh view of the cluster.
func (s *valkeyStore) clusterNode(ctx context.Context, addr string) (*redis.Client, error) {
	var mu sync.Mutex
	var found *redis.Client
	err := s.cluster.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case found == nil:
		return nil, fmt.Errorf("the cluster redirected to %s, a node its client does not know", esc(addr))
	}
	return found, nil
}

// waitKey is the replication sync key a read of key writes: in key's slot
// on a cluster.
func (s *valkeyStore) waitKey(key string) string {
	if s.cluster != nil {
		return keys.WaitIn(key)
	}
	return keys.Wait
}

// ---- reads ----

// Get implements ConditionalStore. STRLEN, EXISTS and one bounded GETRANGE
// of the whole value run in one MULTI/EXEC, so the token and the bytes come
// from one atomic reply and a value over MaxObjectSize is refused having
// transferred at most one byte more than the limit. The whole value is
// checked on the client; see valkeyStore for damage in place
// and for what WaitReplicas adds.
func (s *valkeyStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	v, err := s.getChecked(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return []byte(v[valkeyHeaderOf(v):]), valkeyToken(v), nil
}

// getChecked reads the whole value at key and returns it as the server sent
// it, checked whole: the caller copies out only what it returns.
func (s *valkeyStore) getChecked(ctx context.Context, key string) (string, error) {
	if err := s.checkServer(ctx, "get", key); err != nil {
		return "", err
	}
	limit := s.limit()
	found, _, v, _, err := s.read(ctx, key, valkeyReadEnd(limit), false)
	switch {
	case err != nil:
		return "", err
	case !found:
		return "", storeErr("valkey get", key, ErrNotFound, nil)
	case int64(len(v)-valkeyHeaderOf(v)) > limit:
		return "", tooLarge("valkey get", key, limit)
	}
	if check := valkeyCheck(v); check != "" {
		return "", storeErr("valkey get", key, nil,
			&CorruptError{Key: key, Version: valkeyDamagedVersion(v), Check: check, Head: valkeyDamagedHead(v)})
	}
	return v, nil
}

var _ PrefixReader = (*valkeyStore)(nil)

// GetPrefix implements PrefixReader in one round trip (two with
// WaitReplicas), reading the head of the value (or the header and n bytes
// of data, when more) and checking the head and the length, on both write
// paths; see valkeyStore for the damage that this check finds
// and the one only Get finds. A value read whole (n at least its size) is
// checked whole, as Get checks it; of a larger one, the bytes beyond the
// head are returned as they are. A value of the first layout, or one that
// fails the check, is read again whole, so that GetPrefix gives Get's
// verdict and version.
func (s *valkeyStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", storeErr("valkey get", key, nil, invalidArg("n", "%d, must be at least 1", n))
	}
	if err := s.checkServer(ctx, "get", key); err != nil {
		return nil, 0, "", err
	}
	limit := s.limit()
	end := valkeyReadEnd(limit)
	if n < limit {
		end = min(max(valkeyHeadEnd, valkeyHeaderLen+n)-1, end)
	}
	found, size, h, t, err := s.read(ctx, key, end, true)
	switch {
	case err != nil:
		return nil, 0, "", err
	case !found:
		return nil, 0, "", storeErr("valkey get", key, ErrNotFound, nil)
	case size-int64(valkeyHeaderOf(h)) > limit:
		return nil, 0, "", tooLarge("valkey get", key, limit)
	}
	switch {
	case int64(len(h)) == size:
		// All of it: checked as Get checks it.
		if check := valkeyCheck(h); check != "" {
			return nil, 0, "", storeErr("valkey get", key, nil,
				&CorruptError{Key: key, Version: valkeyDamagedVersion(h), Check: check, Head: valkeyDamagedHead(h)})
		}
	case !strings.HasPrefix(h, valkeyMagic) || valkeyHeadCheck(h, t, size) != "":
		if h, err = s.getChecked(ctx, key); err != nil {
			return nil, 0, "", err
		}
		size = int64(len(h))
	}
	data := h[valkeyHeaderOf(h):]
	return []byte(data[:min(int64(len(data)), n)]), size - int64(valkeyHeaderOf(h)), valkeyToken(h), nil
}

// read reads the value at key up to byte end, and its length, in one
// atomic step; with tail set, also its last valkeyTailLen bytes. With
// WaitReplicas set it also writes the replication sync key in that step
// and WAITs for it on the same connection: the replication stream is
// ordered, so the replicas that acknowledge the write hold everything the
// read saw. A WAIT on a connection that wrote nothing after its read would
// prove nothing.
func (s *valkeyStore) read(ctx context.Context, key string, end int64, tail bool) (found bool, size int64, v, t string, err error) {
	var strlen, exists *redis.IntCmd
	var val, last *redis.StringCmd
	queue := func(p redis.Pipeliner, wait bool) error {
		var cmds []redis.Cmder
		_, err := p.Pipelined(ctx, func(p redis.Pipeliner) error {
			strlen = p.StrLen(ctx, key)
			exists = p.Exists(ctx, key)
			val = p.GetRange(ctx, key, 0, end)
			cmds = []redis.Cmder{strlen, exists, val}
			if tail {
				last = p.GetRange(ctx, key, -valkeyTailLen, -1)
				cmds = append(cmds, last)
			}
			if wait {
				p.Set(ctx, s.waitKey(key), "", 0)
			}
			return nil
		})
		if err != nil {
			return valkeyError("get", key, valkeyRouted(key, valkeyQueuedError(err, cmds...), cmds...))
		}
		return nil
	}
	if s.WaitReplicas <= 0 {
		// A cluster client's transaction follows redirections itself.
		err = queue(s.client.TxPipeline(), false)
	} else {
		err = s.onNode(ctx, "get", key, func(c valkeyConn) error {
			if err := c.ask(ctx); err != nil {
				return valkeyError("get", key, err)
			}
			if err := queue(c.tx.TxPipeline(), true); err != nil {
				return err
			}
			return s.wait(ctx, c.tx, "get", key)
		})
	}
	if err != nil {
		return false, 0, "", "", err
	}
	if tail {
		t = last.Val()
	}
	return exists.Val() != 0, strlen.Val(), val.Val(), t, nil
}

// wait WAITs on conn until WaitReplicas replicas acknowledged every write
// made on it, for at most WaitTimeout (cut to ctx's deadline, and at least
// one millisecond: WAIT 0 blocks for ever). op is the caller's, "get" or
// "put". Fewer, or a WAIT that fails, is a *StoreError of op "valkey
// wait" matching ErrOutcomeUnknown; a cancelled or expired ctx passes
// through untouched (after a write, its outcome is as unknown as after any
// other failure).
func (s *valkeyStore) wait(ctx context.Context, conn *redis.Tx, op, key string) error {
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

// ---- writes ----

// PutIfVersion implements ConditionalStore. A non-empty expectVersion that
// is not a version of this store's forms (a token, or the version of a
// damaged value) cannot equal the current version, so it returns an error
// matching ErrConflict without a round trip.
func (s *valkeyStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.put(ctx, key, [][]byte{data}, expectVersion, nil)
}

var _ PartsPutter = (*valkeyStore)(nil)

// PutPartsIfVersion implements PartsPutter: PutIfVersion of the parts
// joined, laid out straight into the value the store writes.
func (s *valkeyStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
	return s.put(ctx, key, parts, expectVersion, nil)
}

var _ BrandedPutter = (*valkeyStore)(nil)

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
// argument. On a cluster, a brand key in another slot than key is refused
// before any I/O with a *StoreError matching errors.ErrUnsupported (see
// Cluster).
func (s *valkeyStore) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expectVersion string) (string, error) {
	switch {
	case brandKey == "":
		return "", storeErr("valkey put", key, nil, invalidArg("brand key", "empty"))
	case key == brandKey:
		return "", storeErr("valkey put", key, nil, invalidArg("key", "%s is the brand key", esc(key)))
	}
	return s.put(ctx, key, parts, expectVersion, &valkeyBrand{key: brandKey, identity: identity})
}

// put is PutIfVersion, with the brand check when brand is not nil.
func (s *valkeyStore) put(ctx context.Context, key string, parts [][]byte, expectVersion string, brand *valkeyBrand) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if brand != nil && s.cluster != nil && keys.Slot(brand.key) != keys.Slot(key) {
		return "", storeErr("valkey put", key, errors.ErrUnsupported, fmt.Errorf(
			"on a cluster the brand key %s (slot %d) cannot be checked in the write of a key in slot %d: "+
				"no atomic step spans two slots; give the prefix a hash tag, such as \"{app}/\", or verify the brand once (BrandVerify)",
			esc(brand.key), keys.Slot(brand.key), keys.Slot(key)))
	}
	if expectVersion != "" && !validValkeyVersion(expectVersion) && !validValkeyDamagedVersion(expectVersion) {
		return "", storeErr("valkey put", key, ErrConflict,
			fmt.Errorf("%s is not a version this store issues", esc(expectVersion)))
	}
	if err := s.checkServer(ctx, "put", key); err != nil {
		return "", err
	}
	version := newValkeyVersion()
	value := valkeyValue(version, parts)
	if s.Script && s.cluster == nil && s.WaitReplicas <= 0 {
		// No WAIT to follow the write on its connection, no redirection to
		// follow: the script, sent once, runs on any of the client's
		// connections.
		if err := s.putScript(ctx, valkeyConn{r: s.client}, key, version, value, expectVersion, brand); err != nil {
			return "", err
		}
		return version, nil
	}
	err := s.onNode(ctx, "put", key, func(c valkeyConn) error {
		if !s.Script {
			return s.putWatch(ctx, c, key, value, expectVersion, brand)
		}
		err := s.putScript(ctx, c, key, version, value, expectVersion, brand)
		if r := (*valkeyRedirected)(nil); errors.As(err, &r) && r.addr == "" {
			// The key's slot is migrating and the key is still here: a
			// new key (the staging key) cannot be made beside it until it
			// moves, but a transaction over the key alone can run.
			return s.putWatch(ctx, c, key, value, expectVersion, brand)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return version, nil
}

// valkeyBrand is the brand a write depends on: the brand key and the
// identity it must hold.
type valkeyBrand struct{ key, identity string }

// valkeyBrandReadEnd is the last byte of the brand key a write reads: a
// header and record.MaxHeaderSize bytes of data. An identity is far shorter; a
// longer value is refused all the same, cut.
const valkeyBrandReadEnd = valkeyHeaderLen + record.MaxHeaderSize

// verdict is the brand check over what a write read of the brand key: its
// value cut at valkeyBrandReadEnd. A value read whole must be intact (its
// head, as a write checks a value); one longer than the read is compared
// cut, and cannot equal an identity.
func (b *valkeyBrand) verdict(key string, exists bool, value string) error {
	if !exists {
		return compareBrand(b.key, b.identity, nil, false)
	}
	if len(value) <= valkeyBrandReadEnd {
		if check := valkeyHeadOrFirstCheck(value, value, int64(len(value))); check != "" {
			return b.notIntact(key, valkeyDamagedVersion(value), check)
		}
	}
	return compareBrand(b.key, b.identity, []byte(value[min(len(value), valkeyHeaderOf(value)):]), true)
}

// notIntact reports a brand key that exists but is not an intact value of
// this store: damage, final, as a Get of the brand key reports it, with the
// damaged version of the value read.
func (b *valkeyBrand) notIntact(key, version, check string) error {
	return storeErr("valkey put", key, nil,
		&CorruptError{Key: b.key, Version: version, Check: "brand key: " + check})
}

// putWatch is the WATCH path: round trip one is WATCH on key (and the
// brand key) followed by the reads of the head, the tail and the length,
// pipelined;
// round trip two is MULTI, SET, EXEC; with WaitReplicas set, round trip
// three is WAIT. A value of the first layout longer than the head, and a
// damaged one, is read whole in between, under the same WATCH. The reads
// are commands of their own, which a rival's write may fall between: a
// refusal that rests on more than one of them (damage, a value too large,
// a brand key that is not intact) is returned only once an EXEC of a
// mere EXISTS, in place of the UNWATCH, shows that no WATCHed key changed,
// and is a conflict otherwise. Everything runs on one dedicated
// connection. Whenever EXEC did not run,
// an UNWATCH is sent before the connection goes back to the pool, so no
// WATCH outlives the call; a connection in an unknown state (a transport
// error, a cancelled ctx) is closed by the client instead of pooled.
func (s *valkeyStore) putWatch(ctx context.Context, c valkeyConn, key string, value []byte, expectVersion string, brand *valkeyBrand) error {
	tx := c.tx
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

	// The WATCH travels in the first pipeline, so Client.Watch (called
	// with no keys) costs no round trip of its own; it does not know about
	// that WATCH, hence the explicit UNWATCH. The key is boxed once for
	// the commands that name it.
	limit := s.limit()
	k := any(key)
	watch := redis.NewStatusCmd(ctx, "watch", k)
	if brand != nil {
		watch = redis.NewStatusCmd(ctx, "watch", k, brand.key)
	}
	size := redis.NewIntCmd(ctx, "strlen", k)
	exists := redis.NewIntCmd(ctx, "exists", k)
	head := redis.NewStringCmd(ctx, "getrange", k, 0, valkeyHeadLast(limit))
	tail := redis.NewStringCmd(ctx, "getrange", k, -valkeyTailLen, -1)
	var all [7]redis.Cmder
	cmds := append(all[:0], watch, size, exists, head, tail)
	var brandExists *redis.IntCmd
	var brandValue *redis.StringCmd
	if brand != nil {
		brandExists = redis.NewIntCmd(ctx, "exists", brand.key)
		brandValue = redis.NewStringCmd(ctx, "getrange", brand.key, 0, valkeyBrandReadEnd)
		cmds = append(cmds, brandExists, brandValue)
	}
	if err := c.send(ctx, cmds...); err != nil {
		what := "the key"
		if brand != nil && head.Err() == nil && valkeyErrorCode(brandValue.Err()) == "WRONGTYPE" {
			what = "brand key " + esc(brand.key)
		}
		return valkeyErrorAbout("put", key, what, valkeyRouted(key, err, cmds...))
	}

	// whole reads the whole value, under the WATCH: the first layout is
	// checked whole, and damage is named by all of its bytes. The value is
	// kept as the client returned it, a string, and never copied.
	var whole string
	read1 := false
	readWhole := func() error {
		if read1 {
			return nil
		}
		get := redis.NewStringCmd(ctx, "getrange", k, 0, valkeyReadEnd(limit))
		if err := c.send(ctx, get); err != nil {
			return valkeyError("put", key, valkeyRouted(key, err, get))
		}
		whole, read1 = get.Val(), true
		return nil
	}
	// exec runs cmd between MULTI and EXEC, which ends the WATCH whether
	// it commits or aborts: an abort (a WATCHed key changed) is a
	// conflict.
	exec := func(cmd redis.Cmder) error {
		if err := c.ask(ctx); err != nil {
			return valkeyError("put", key, err)
		}
		p := tx.TxPipeline()
		_ = p.Process(ctx, cmd)
		_, err := p.Exec(ctx)
		// An EXECABORT (a command refused while queued) discards the
		// transaction, and the WATCH, too.
		if err == nil || errors.Is(err, redis.TxFailedErr) || redis.IsExecAbortError(err) {
			execRan = true
		}
		if errors.Is(err, redis.TxFailedErr) {
			return storeErr("valkey put", key, ErrConflict, err)
		}
		if err != nil {
			// A command refused while queued (NOPERM for a user who may
			// only read the key, an ASK while the slot migrates)
			// discards the transaction: say why.
			return valkeyError("put", key, valkeyRouted(key, valkeyQueuedError(err, cmd), cmd))
		}
		return nil
	}
	// confirm returns refusal, a verdict that rests on more than one of
	// the reads above, once an EXEC has shown that no WATCHed key changed
	// since the WATCH: the reads are commands of their own, and a rival's
	// write landing between two of them would make an intact value look
	// damaged or too large, or a deleted brand look damaged. When a key
	// changed, the write is in conflict, as its own EXEC would have been.
	// The EXEC ends the WATCH in place of the UNWATCH.
	confirm := func(refusal error) error {
		if err := exec(redis.NewIntCmd(ctx, "exists", k)); err != nil {
			return err
		}
		return refusal
	}
	found, n := exists.Val() != 0, size.Val()
	var token, check string
	if found {
		h := head.Val()
		if n-int64(valkeyHeaderOf(h)) > limit {
			return confirm(tooLarge("valkey put", key, limit))
		}
		if !strings.HasPrefix(h, valkeyMagic) && n > int64(len(h)) {
			if err := readWhole(); err != nil {
				return err
			}
			h = whole
		}
		if check = valkeyHeadOrFirstCheck(h, tail.Val(), n); check == "" {
			start := valkeyTokenStart(h)
			token = h[start : start+valkeyVersionLen]
		}
	}
	if brand != nil {
		if err := brand.verdict(key, brandExists.Val() != 0, brandValue.Val()); errors.Is(err, ErrCorrupt) {
			return confirm(err)
		} else if err != nil {
			return err
		}
	}
	switch {
	case strings.HasPrefix(expectVersion, valkeyDamagedPrefix) || check != "":
		if !found {
			return storeErr("valkey put", key, ErrConflict, nil)
		}
		if err := readWhole(); err != nil {
			return err
		}
		if dv := valkeyDamagedVersion(whole); dv != expectVersion {
			if check != "" {
				return confirm(storeErr("valkey put", key, nil, &CorruptError{Key: key, Version: dv, Check: check}))
			}
			return storeErr("valkey put", key, ErrConflict, nil)
		}
	case expectVersion == "":
		if found {
			return storeErr("valkey put", key, ErrConflict, nil)
		}
	case !found || token != expectVersion:
		return storeErr("valkey put", key, ErrConflict, nil)
	}

	// The client would send the write on a cancelled ctx: refuse here,
	// so a cancelled call writes nothing.
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := exec(redis.NewStatusCmd(ctx, "set", k, value)); err != nil {
		return err
	}
	if s.WaitReplicas > 0 {
		return s.wait(ctx, tx, "put", key)
	}
	return nil
}

// valkeyChecksLua are the checks of valkeyHeadCheck and valkeyFirstCheck
// in Lua, shared by the scripts: the same checks in the same order, with
// the same names. head checks a value of this layout of size bytes from
// g, its first 44 bytes (the layout and the head digest), c, the rest of
// its head (bytes 44 to 3899, or to its end), and t, its last 100 bytes
// when it is longer than its head (nil otherwise); the digest is taken
// over c and t straight from the reads, with no copy of c; it returns the
// check that failed, or false and the token. first checks a whole value
// of the first layout; check checks a value v read whole.
const valkeyChecksLua = `
local function head(g, c, t, size)
  if size < 100 then return 'valkey value shorter than its header' end
  local covered = c
  if t then covered = c .. string.sub(t, 101 - math.min(100, size - 3900)) end
  if redis.sha1hex(covered) ~= string.sub(g, 5, 44) then return 'valkey head digest' end
  local token = string.sub(c, 1, 32)
  if not string.find(token, '^[0-9a-f]+$') then return 'valkey version token' end
  local n = string.sub(c, 33, 48)
  if not string.find(n, '^[0-9a-f]+$') or tonumber(n, 16) ~= size - 100 then return 'valkey data length' end
  return false, token
end
local function first(v)
  if string.len(v) < 72 then return 'valkey value shorter than its header' end
  if not string.find(string.sub(v, 41, 72), '^[0-9a-f]+$') then return 'valkey version token' end
  if redis.sha1hex(string.sub(v, 41)) ~= string.sub(v, 1, 40) then return 'valkey value digest' end
  return false
end
local function check(v)
  local size = string.len(v)
  if string.sub(v, 1, 4) ~= 'WFV2' then return first(v) end
  local t = size > 3900 and string.sub(v, -100) or nil
  return head(string.sub(v, 1, 44), string.sub(v, 45, 3900), t, size)
end
`

// valkeyPutScript is the check and the write of the Script path, in the
// order of the WATCH path: the size, the brand, then the precondition. It
// reads the head and the tail of the current value (the whole value only
// in the first layout, or to name or settle damage). A small new value
// comes in its call (ARGV[5]) and is SET, with no expiry; a larger one
// waits under the staging key, never read: RENAME moves it onto the key
// without a copy, and PERSIST drops the staging key's expiry. STRLEN comes first
// so that a key of another type fails with WRONGTYPE, as on the WATCH
// path; EXISTS only tells an empty value from none. A current value whose
// first 44 bytes are the new value's (the layout and the head digest,
// which covers the new token) can only be this very write (its token is
// new), moved by an earlier attempt whose reply was lost: it reports
// success, so a retried script never turns its own write into a conflict,
// even when the brand changed since it landed (it was admitted under the
// right brand); it writes the sync key so that a WAIT after it has a write
// of this connection to wait for. Every refusal deletes the staged value,
// when there is one.
//
// Every byte a script takes in (an argument, a reply of redis.call, a
// substring) is a Lua string the server allocates and later collects, at
// about 1 ns a byte on top of what the bytes cost elsewhere: the script
// reads the head's bytes past the digest in one GETRANGE, the 44 bytes
// before them in another, and hashes the first read as it comes, with no
// copy of it. A small new value is taken in all the same (ARGV[5]): up to
// valkeyInlineMax bytes, that costs the server less than the staging
// SET, RENAME and PERSIST, and spares the client a pipeline.
//
// KEYS[1]: the data key; KEYS[2]: the staging key, unless ARGV[5] holds
// the value; then the brand key, when ARGV[6] is given; then the sync key,
// when ARGV[4] is "1". Only the keys the script touches are declared,
// because the server checks the ACL of every declared key. ARGV[1]: the
// expected version, "" for absent. ARGV[2]: the new value's first 44
// bytes. ARGV[3]: the read limit. ARGV[4]: "1" when the caller will WAIT.
// ARGV[5]: the new value, or "" when it is staged (a value is never
// empty). With a brand key, ARGV[6]: the identity it must hold; ARGV[7]:
// the last byte of it to read. Returns 1
// when written, 0 on a failed precondition, {"toolarge"}, {"corrupt",
// check, damaged version}, {"unstaged"} when the staged value is gone
// (expired), or a brand refusal: {"absent"}, {"layout", check, damaged
// version} for a value that is not an intact value of this store, or
// {"found", data}.
var valkeyPutScript = redis.NewScript(valkeyPutLua)

// valkeyPutLua is the put script's source.
const valkeyPutLua = valkeyChecksLua + `
local key, expect, value = KEYS[1], ARGV[1], ARGV[5]
local staged = value == '' and KEYS[2]
local brandKey = ARGV[6] and KEYS[staged and 3 or 2]
local waitKey = ARGV[4] == '1' and KEYS[#KEYS]
local function refuse(r)
  if staged then redis.call('UNLINK', staged) end
  return r
end
local size = redis.call('STRLEN', key)
local exists = size > 0 or redis.call('EXISTS', key) == 1
local token, damage
if exists then
  local g = redis.call('GETRANGE', key, 0, 43)
  if g == ARGV[2] then
    if waitKey then redis.call('SET', waitKey, '') end
    return refuse(1)
  end
  local hl = 72
  if string.sub(g, 1, 4) == 'WFV2' then hl = 100 end
  if size - hl > tonumber(ARGV[3]) then return refuse({'toolarge'}) end
  if hl == 100 then
    local t = size > 3900 and redis.call('GETRANGE', key, -100, -1) or nil
    damage, token = head(g, redis.call('GETRANGE', key, 44, 3899), t, size)
  else
    local v = redis.call('GET', key)
    damage = first(v)
    if not damage then token = string.sub(v, 41, 72) end
  end
end
if brandKey then
  local brand = redis.call('GETRANGE', brandKey, 0, tonumber(ARGV[7]))
  if redis.call('EXISTS', brandKey) == 0 then return refuse({'absent'}) end
  if string.len(brand) <= tonumber(ARGV[7]) then
    local c = check(brand)
    if c then return refuse({'layout', c, 'damaged-' .. redis.sha1hex(brand)}) end
  end
  local bl = 72
  if string.sub(brand, 1, 4) == 'WFV2' then bl = 100 end
  local data = string.sub(brand, bl + 1)
  if data ~= ARGV[6] then return refuse({'found', data}) end
end
if string.sub(expect, 1, 8) == 'damaged-' or damage then
  if not exists then return refuse(0) end
  local dv = 'damaged-' .. redis.sha1hex(redis.call('GET', key))
  if dv ~= expect then
    if damage then return refuse({'corrupt', damage, dv}) end
    return refuse(0)
  end
elseif expect == '' then
  if exists then return refuse(0) end
elseif token ~= expect then
  return refuse(0)
end
if not staged then
  redis.call('SET', key, value)
  return 1
end
if redis.pcall('RENAME', staged, key).err then return {'unstaged'} end
redis.call('PERSIST', key)
return 1
`

// valkeyOnce is a command go-redis never sends twice: its NoRetry (see
// redis.Cmder) keeps the client from retrying it, or a pipeline holding
// it, after a failure that may have reached the server, whatever the
// client's MaxRetries. (A failure before a byte of it was written, which
// the client may still retry, is its first execution.)
type valkeyOnce struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (valkeyOnce) NoRetry() bool { return true }

// putScript is the Script path: one round trip of the script (EVALSHA,
// then EVAL when the server does not hold the script), with the value in
// its call up to valkeyInlineMax bytes and after a staging SET in the same
// round trip beyond, and a WAIT after it when WaitReplicas is set, on the
// same connection.
//
// The script is a valkeyOnce command: go-redis retries a command whose
// reply was lost, and a re-sent script that finds a rival's write after
// its own would report a conflict for a write that landed; the client
// never sends it twice, so the error stays ambiguous, as it is. It
// therefore needs no connection of its own, and on a standalone server
// without WaitReplicas it runs on the client's pool (c.tx is nil), which
// spares the call a transaction's setup. With WaitReplicas it runs on the
// dedicated connection c, where the WAIT must follow a write of its own;
// on a cluster too, so that a write that meets a migrating slot can take
// the WATCH path there.
func (s *valkeyStore) putScript(ctx context.Context, c valkeyConn, key, version string, value []byte, expectVersion string, brand *valkeyBrand) error {
	wait := "0"
	if s.WaitReplicas > 0 {
		wait = "1"
	}
	limit := s.limit()
	inline := len(value) <= valkeyInlineMax
	var staged string
	var stage *redis.StatusCmd
	nkeys := 1
	if !inline {
		staged = keys.Staged(key, version)
		stage = redis.NewStatusCmd(ctx, "set", staged, value, "px", valkeyStagedTTLMillis)
		nkeys++
	}
	if brand != nil {
		nkeys++
	}
	if s.WaitReplicas > 0 {
		nkeys++
	}
	a := make([]any, 0, 3+nkeys+7)
	a = append(a, "evalsha", valkeyPutScript.Hash(), nkeys, key)
	if !inline {
		a = append(a, staged)
	}
	if brand != nil {
		a = append(a, brand.key)
	}
	if s.WaitReplicas > 0 {
		a = append(a, s.waitKey(key))
	}
	a = append(a, expectVersion, value[:valkeyTokenOff], limit, wait)
	if inline {
		a = append(a, value)
	} else {
		a = append(a, "")
	}
	if brand != nil {
		a = append(a, brand.identity, valkeyBrandReadEnd)
	}
	cmd := valkeyOnce{redis.NewCmd(ctx, a...)}
	sent := []redis.Cmder{cmd}
	if !inline {
		sent = []redis.Cmder{stage, cmd}
	}
	err := c.send(ctx, sent...)
	if err != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		// The script did not run (a staged value is still in place):
		// send the script itself.
		a = slices.Clone(a)
		a[0], a[1] = "eval", valkeyPutLua
		cmd = valkeyOnce{redis.NewCmd(ctx, a...)}
		sent[len(sent)-1] = cmd
		err = c.send(ctx, cmd)
	}
	var reply redis.Error
	if err != nil && !inline && stage.Err() == nil && errors.As(cmd.Err(), &reply) {
		// The server refused the script (NOPERM, WRONGTYPE, a
		// redirection): it wrote nothing, and the staged value need not
		// wait for its expiry.
		_ = c.send(ctx, redis.NewIntCmd(ctx, "unlink", staged))
	}
	if err != nil {
		what := "the key"
		if brand != nil {
			what = "the key or brand key " + esc(brand.key)
		}
		return valkeyErrorAbout("put", key, what, valkeyRouted(key, err, sent...))
	}
	res := cmd.Val()
	switch r := res.(type) {
	case int64:
		if r != 1 {
			return storeErr("valkey put", key, ErrConflict, nil)
		}
		if s.WaitReplicas > 0 {
			return s.wait(ctx, c.tx, "put", key)
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
			return storeErr("valkey put", key, nil, &CorruptError{Key: key, Version: version, Check: check})
		case what == "unstaged" && len(r) == 1:
			return storeErr("valkey put", key, nil,
				fmt.Errorf("the staged value %s was gone when the script ran (it expires after %v); nothing was written", esc(staged), valkeyStagedTTL))
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

// ---- delete and list ----

var _ Deleter = (*valkeyStore)(nil)

// Delete implements Deleter.
func (s *valkeyStore) Delete(ctx context.Context, key string) error {
	if err := s.checkServer(ctx, "delete", key); err != nil {
		return err
	}
	if err := s.client.Del(ctx, key).Err(); err != nil {
		return valkeyError("delete", key, err)
	}
	return nil
}

// valkeyListCount is the COUNT hint of each SCAN step of List.
const valkeyListCount = 512

var _ Lister = (*valkeyStore)(nil)

// List implements Lister with SCAN MATCH over the selected database, on a
// cluster over every primary in turn. SCAN may return a key more than once
// (and a key a migration moves may be seen on two primaries); List calls
// fn once per key. Keys are returned in no particular order.
func (s *valkeyStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	if err := s.checkServer(ctx, "list", prefix); err != nil {
		return err
	}
	nodes := []redis.Cmdable{s.client}
	if s.cluster != nil {
		var mu sync.Mutex
		var masters []*redis.Client
		err := s.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			masters = append(masters, c)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return valkeyError("list", prefix, err)
		}
		slices.SortFunc(masters, func(a, b *redis.Client) int { return cmp.Compare(a.Options().Addr, b.Options().Addr) })
		nodes = nodes[:0]
		for _, m := range masters {
			nodes = append(nodes, m)
		}
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
	for _, node := range nodes {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern.String(), valkeyListCount).Result()
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
				break
			}
			cursor = next
		}
	}
	return ctx.Err()
}

// ---- the layout ----

// newValkeyVersion draws a fresh version token.
func newValkeyVersion() string {
	var b [valkeyVersionLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand aborts the program instead
	return hex.EncodeToString(b[:])
}

// valkeyValue lays out a value: the header, then the data (the parts
// joined), with one pass over the data for its CRC-32C.
func valkeyValue(version string, parts [][]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	value := make([]byte, valkeyHeaderLen, valkeyHeaderLen+n)
	copy(value, valkeyMagic)
	copy(value[valkeyTokenOff:], version)
	var crc uint32
	for _, p := range parts {
		crc = crc32.Update(crc, record.Castagnoli, p)
		value = append(value, p...)
	}
	putHex(value[valkeyLengthOff:valkeyCRCOff], uint64(n))
	putHex(value[valkeyCRCOff:valkeyHeaderLen], uint64(crc))
	var sum [sha1.Size]byte
	if len(value) <= valkeyHeadEnd {
		// All head: one contiguous run, hashed without a hash.Hash.
		sum = sha1.Sum(value[valkeyTokenOff:])
	} else {
		h := sha1.New()
		h.Write(value[valkeyTokenOff:valkeyHeadEnd])
		h.Write(value[max(valkeyHeadEnd, len(value)-valkeyTailLen):])
		h.Sum(sum[:0])
	}
	hex.Encode(value[valkeyDigestOff:valkeyTokenOff], sum[:])
	return value
}

// putHex writes x into b in lower-case hex, zero-padded to len(b).
func putHex(b []byte, x uint64) {
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[x&0xf]
		x >>= 4
	}
}

// parseHex reads s, lower-case hex digits only.
func parseHex(s string) (uint64, bool) {
	if s == "" || len(s) > 16 || !keys.IsLowerHex(s) {
		return 0, false
	}
	var x uint64
	for i := range len(s) {
		c := uint64(s[i])
		if c <= '9' {
			c -= '0'
		} else {
			c -= 'a' - 10
		}
		x = x<<4 | c
	}
	return x, true
}

// valkeyHeaderOf is the length of the header of v's layout.
func valkeyHeaderOf(v string) int {
	if strings.HasPrefix(v, valkeyMagic) {
		return valkeyHeaderLen
	}
	return valkeyFirstHeaderLen
}

// valkeyToken returns the version token of an intact value, copied: a
// caller keeps a version (a Fence caches it), and a substring would keep
// the whole value alive with it.
func valkeyToken(v string) string {
	start := valkeyTokenStart(v)
	return strings.Clone(v[start : start+valkeyVersionLen])
}

// valkeyTokenStart is where the version token starts in v's layout.
func valkeyTokenStart(v string) int {
	if strings.HasPrefix(v, valkeyMagic) {
		return valkeyTokenOff
	}
	return valkeyFirstDigestLen
}

// valkeyHeadCheck returns the check that a value of this layout fails in
// its head h (its first valkeyHeadEnd bytes, or all of it when shorter;
// more is ignored), its tail t (its last valkeyTailLen bytes, or all of
// it; more is ignored) and its length size, or "" when they are intact. It
// is the check of the writes and of GetPrefix; valkeyChecksLua repeats it
// on the server.
func valkeyHeadCheck(h, t string, size int64) string {
	if len(h) < valkeyHeaderLen || size < valkeyHeaderLen {
		return "valkey value shorter than its header"
	}
	if headEnd := min(size, valkeyHeadEnd); int64(len(h)) < headEnd || int64(len(t)) < size-max(headEnd, size-valkeyTailLen) {
		return "valkey data length" // fewer bytes than the length read
	}
	sum := valkeyHeadDigest(h, t, size)
	var digest [2 * sha1.Size]byte
	hex.Encode(digest[:], sum[:])
	switch n, ok := parseHex(h[valkeyLengthOff:valkeyCRCOff]); {
	case string(digest[:]) != h[valkeyDigestOff:valkeyTokenOff]:
		return "valkey head digest"
	case !validValkeyVersion(h[valkeyTokenOff:valkeyLengthOff]):
		return "valkey version token"
	case !ok || n != uint64(size-valkeyHeaderLen):
		return "valkey data length"
	}
	return ""
}

// valkeyHeadDigest is the head digest of a value of size bytes that
// starts with h and ends with t (h holds at least its head, t at least its
// tail: the whole value will do for both): the SHA-1 of the head from
// valkeyTokenOff on, then of the tail.
func valkeyHeadDigest(h, t string, size int64) [sha1.Size]byte {
	headEnd := min(size, valkeyHeadEnd)
	tail := size - max(headEnd, size-valkeyTailLen)
	// What the digest covers fits in a buffer on the stack: hashed in one
	// call, with no hash.Hash to allocate.
	var buf [valkeyHeadEnd - valkeyTokenOff + valkeyTailLen]byte
	n := copy(buf[:], h[valkeyTokenOff:headEnd])
	n += copy(buf[n:], t[int64(len(t))-tail:])
	return sha1.Sum(buf[:n])
}

// valkeyFirstCheck returns the check a whole value of the first layout
// fails, or "".
func valkeyFirstCheck(v string) string {
	switch {
	case len(v) < valkeyFirstHeaderLen:
		return "valkey value shorter than its header"
	case !validValkeyVersion(v[valkeyFirstDigestLen:valkeyFirstHeaderLen]):
		return "valkey version token"
	}
	sum := valkeySHA1(v[valkeyFirstDigestLen:])
	var digest [2 * sha1.Size]byte
	hex.Encode(digest[:], sum[:])
	if string(digest[:]) != v[:valkeyFirstDigestLen] {
		return "valkey value digest"
	}
	return ""
}

// valkeyHeadOrFirstCheck is the check of a write: the head h and tail t of
// a value of this layout, or the whole of one of the first layout (h is
// then all of it).
func valkeyHeadOrFirstCheck(h, t string, size int64) string {
	if strings.HasPrefix(h, valkeyMagic) {
		return valkeyHeadCheck(h, t, size)
	}
	return valkeyFirstCheck(h)
}

// valkeyCheck returns the check a whole stored value fails, or "" when it
// is an intact value of this store: the head, and the data's CRC-32C.
func valkeyCheck(v string) string {
	if check := valkeyHeadOrFirstCheck(v, v, int64(len(v))); check != "" || !strings.HasPrefix(v, valkeyMagic) {
		return check
	}
	want, ok := parseHex(v[valkeyCRCOff:valkeyHeaderLen])
	if !ok || uint64(valkeyCRC(v[valkeyHeaderLen:])) != want {
		return "valkey data checksum"
	}
	return ""
}

// valkeySHA1 is the SHA-1 of the strings ss, one after the other. A value
// comes from the client as a string; hashing it through a small buffer
// spares a copy of the whole value.
func valkeySHA1(ss ...string) [sha1.Size]byte {
	h := sha1.New()
	var buf [8 << 10]byte
	for _, s := range ss {
		for len(s) > 0 {
			n := copy(buf[:], s)
			h.Write(buf[:n])
			s = s[n:]
		}
	}
	var sum [sha1.Size]byte
	h.Sum(sum[:0])
	return sum
}

// valkeyCRC is the CRC-32C of s, through a small buffer as valkeySHA1.
func valkeyCRC(s string) uint32 {
	var crc uint32
	var buf [32 << 10]byte
	for len(s) > 0 {
		n := copy(buf[:], s)
		crc = crc32.Update(crc, record.Castagnoli, buf[:n])
		s = s[n:]
	}
	return crc
}

// valkeyDamagedVersion is the version of a value that fails valkeyCheck:
// it names exactly those bytes.
func valkeyDamagedVersion(v string) string {
	sum := valkeySHA1(v)
	return valkeyDamagedPrefix + hex.EncodeToString(sum[:])
}

// valkeyDamagedHead is the head of a damaged value's data, where its layout
// still places it: what follows the header, as much of it as was read.
func valkeyDamagedHead(v string) []byte {
	start := valkeyHeaderOf(v)
	if len(v) <= start {
		return nil
	}
	return []byte(v[start:])
}

// valkeyHeadLast is the last byte of a value's head that a write reads,
// boxed: valkeyHeadEnd-1, unless limit cuts the read shorter.
func valkeyHeadLast(limit int64) any {
	if end := valkeyReadEnd(limit); end < valkeyHeadEnd-1 {
		return end
	}
	return valkeyHeadLastBoxed
}

var valkeyHeadLastBoxed any = int64(valkeyHeadEnd - 1)

// valkeyReadEnd is the last byte index a read of a value under limit asks
// GETRANGE for: one past the limit tells that the value is larger. Clamped
// so the sum cannot overflow.
func valkeyReadEnd(limit int64) int64 {
	if limit < math.MaxInt64-1-valkeyHeaderLen {
		return valkeyHeaderLen + limit
	}
	return math.MaxInt64 - 1
}

// validValkeyVersion reports whether v has the form of a version token.
func validValkeyVersion(v string) bool {
	return len(v) == valkeyVersionLen && keys.IsLowerHex(v)
}

// validValkeyDamagedVersion reports whether v has the form of the version
// of a damaged value.
func validValkeyDamagedVersion(v string) bool {
	h, ok := strings.CutPrefix(v, valkeyDamagedPrefix)
	return ok && len(h) == 2*sha1.Size && keys.IsLowerHex(h)
}

// ---- errors ----

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
