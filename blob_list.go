package writefence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/writefence/writefence/internal/hook"
)

// ConsistentBlobLister is an optional capability of a BlobStore, used
// through StatBlobs: a listing a Commit can check its new blobs by, one
// request a thousand blobs on S3 and GCS.
type ConsistentBlobLister interface {
	// ListBlobsConsistent is ListBlobs of the keys after after (all when
	// empty) that also lists every such blob whose CreateBlob returned
	// before the call began and none whose DeleteBlob did, with StatBlob's
	// Size and Modified. A store whose listing may lag must not declare it.
	ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(BlobInfo) error) error
}

// statListMin is how many of the keys StatBlobs checks must share a
// prefix for the prefix to be listed: a key alone is checked with
// StatBlob, one request, which a listing that may run over blobs no key
// names can only equal.
const statListMin = 2

// listBudget is how many blobs a listing of StatBlobs may run over at
// least: one page of S3's or GCS's listing.
const listBudget = 1000

// statWorkers bounds the StatBlobs made at once.
const statWorkers = 16

// errListBudget stops a listing that ran over more blobs than it pays to.
var errListBudget = errors.New("writefence: listing over its budget")

// StatBlobs returns, by key, the info StatBlob gives of each blob of keys
// that exists; every key starts with one of prefixes. On a store that
// declares ConsistentBlobLister (see Capable), a prefix two or more keys
// share is listed once, from the least of them, over at most max(1000, 2
// × its keys) blobs; other keys are checked with StatBlob, 16 at a time.
// The first failure other than ErrNotFound ends the call. Commit checks
// its new blobs with it.
func StatBlobs(ctx context.Context, s ConditionalStore, prefixes, keys []string) (map[string]BlobInfo, error) {
	return statBlobs(ctx, s, prefixes, keys, nil, nil)
}

// statBlobs is StatBlobs, told of others: keys of other blobs known to
// exist (a commit knows the blobs its record references already). A
// prefix whose listing from its least key would run over its budget on
// those alone is not listed: its keys are checked with StatBlob. Blob
// names sort in the order they were put (see blobIDs.next), so the new
// blobs of a long epoch, where thousands of blobs share the prefix, are
// its last: a commit of a few new ones lists those, and never a thousand
// blobs that may not show them. The keys under the prefix of
// ahead, a listing started before (nil for none), are checked by it when it
// ended within its budget: those it did not show with StatBlob, but those
// before where it began (after a blob of a clock ahead, or of an id
// before ids carried the time), which are listed as if there were none.
func statBlobs(ctx context.Context, s ConditionalStore, prefixes, keys, others []string, ahead *aheadListing) (map[string]BlobInfo, error) {
	bs, ok := capability[BlobStore](s)
	if !ok {
		return nil, fmt.Errorf("writefence: the store %T holds no blobs (it declares no BlobStore): %w", s, errors.ErrUnsupported)
	}
	for _, k := range keys {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			return nil, invalidArg("keys", "%s starts with none of the prefixes", esc(k))
		}
	}
	found := make(map[string]BlobInfo, len(keys))
	pending := keys
	if listed, complete, ok := ahead.wait(ctx, prefixes); ok {
		var rest, unseen, before []string
		for _, k := range keys {
			_, seen := listed[k]
			switch {
			case !strings.HasPrefix(k, ahead.prefix):
				rest = append(rest, k)
			case seen:
			case k <= ahead.after:
				before = append(before, k)
			default:
				unseen = append(unseen, k)
			}
		}
		// Of a listing cut at its budget, the keys it did not show are
		// left to the listing below, with a budget by their number; so
		// are those that sort before where it began: it never ran over
		// them.
		if complete || len(unseen) == 0 {
			for _, k := range keys {
				if info, seen := listed[k]; seen && strings.HasPrefix(k, ahead.prefix) {
					found[k] = info
				}
			}
			if len(before) == 0 {
				prefixes = slices.DeleteFunc(slices.Clone(prefixes), func(p string) bool { return p == ahead.prefix })
			}
			if err := statEach(ctx, bs, unseen, found); err != nil {
				return nil, err
			}
			pending = append(rest, before...)
		}
	}
	if lister, ok := capability[ConsistentBlobLister](s); ok {
		var err error
		if pending, err = listBlobs(ctx, lister, prefixes, pending, others, hook.ListBudget(ctx), found); err != nil {
			return nil, err
		}
	}
	if err := statEach(ctx, bs, pending, found); err != nil {
		return nil, err
	}
	return found, nil
}

// listBlobs lists each prefix that statListMin of keys share, from the
// least of them, unless others says its listing would run over its
// budget, records in found the keys it shows, and returns the keys left
// to stat.
func listBlobs(ctx context.Context, lister ConsistentBlobLister, prefixes, keys, others []string, base int, found map[string]BlobInfo) ([]string, error) {
	// base, when above zero, is the budget a simulation sets.
	byPrefix := map[string][]string{}
	var rest []string
	for _, k := range keys {
		i := slices.IndexFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) })
		byPrefix[prefixes[i]] = append(byPrefix[prefixes[i]], k)
	}
	for _, p := range prefixes {
		ks := byPrefix[p]
		budget := max(listBudget, 2*len(ks))
		if base > 0 {
			budget = base
		}
		if len(ks) < statListMin {
			rest = append(rest, ks...)
			continue
		}
		least := slices.Min(ks)
		known := 0
		for _, k := range others {
			if strings.HasPrefix(k, p) && k >= least {
				known++
			}
		}
		if known+len(ks) > budget {
			rest = append(rest, ks...)
			continue
		}
		want := make(map[string]bool, len(ks))
		for _, k := range ks {
			want[k] = true
		}
		// A key shorter by its last byte sorts before least, and before
		// no key that does not; "" has none: the listing starts at the
		// first key.
		after := ""
		if least != "" {
			after = least[:len(least)-1]
		}
		err := lister.ListBlobsConsistent(ctx, p, after, func(b BlobInfo) error {
			if want[b.Key] {
				found[b.Key] = b
			}
			if budget--; budget <= 0 {
				return errListBudget
			}
			return nil
		})
		if err != nil && !errors.Is(err, errListBudget) {
			return nil, err
		}
		delete(byPrefix, p)
		for _, k := range ks {
			if _, ok := found[k]; !ok {
				rest = append(rest, k)
			}
		}
	}
	return rest, nil
}

// statEach stats keys, statWorkers at a time, and records in found those
// that exist.
func statEach(ctx context.Context, bs BlobStore, keys []string, found map[string]BlobInfo) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex // guards found, first and next
		first error
		next  int
		wg    sync.WaitGroup
	)
	for range min(statWorkers, len(keys)) {
		wg.Go(func() {
			for {
				mu.Lock()
				if first != nil || next == len(keys) {
					mu.Unlock()
					return
				}
				k := keys[next]
				next++
				mu.Unlock()
				info, err := bs.StatBlob(ctx, k)
				mu.Lock()
				switch {
				case err == nil:
					found[k] = info
				case errors.Is(err, ErrNotFound):
				case first == nil:
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// aheadListing is a consistent listing of one prefix that runs beside the
// read of a record, started before the decision that needs it is made (see
// Fence.Commit), while the record was at version, as far as the Fence
// knew. For a decision on the record read at that version, and written
// only if it still is, it is evidence as good as a listing made after the
// read: the record held that one version from before the listing to the
// write, as it does around a listing made between the two. Not otherwise:
// a Collect that raised the horizon and deleted a blob the listing showed,
// then an outside restore of the record to its content before the horizon,
// leave a record whose read tells nothing of the deletion.
type aheadListing struct {
	prefix  string
	after   string // it lists the keys of prefix that sort after it
	version string
	cancel  context.CancelFunc
	done    chan struct{} // closed when the listing ended; found and complete are set then
	found   map[string]BlobInfo
	// complete: the listing ended within its budget, without an error,
	// so a blob of the prefix after after it did not show did not exist
	// when it ran.
	complete bool
}

// listAhead starts a listing of the keys of prefix after after over at
// most budget blobs, while the record is at version.
func listAhead(ctx context.Context, lister ConsistentBlobLister, prefix, after string, budget int, version string) *aheadListing {
	ctx, cancel := context.WithCancel(ctx)
	l := &aheadListing{prefix: prefix, after: after, version: version, cancel: cancel, done: make(chan struct{}), found: map[string]BlobInfo{}}
	go func() {
		defer close(l.done)
		err := lister.ListBlobsConsistent(ctx, prefix, after, func(b BlobInfo) error {
			l.found[b.Key] = b
			if budget--; budget <= 0 {
				return errListBudget
			}
			return nil
		})
		switch {
		case err == nil:
			l.complete = true
		case !errors.Is(err, errListBudget):
			l.found = nil // a failed listing shows nothing
		}
	}()
	return l
}

// wait returns, once the listing ended, what it found and whether it is
// complete; ok is false when l is nil, the listing failed, or ctx ended
// first, and, without waiting, when l's prefix is none of prefixes: a
// check that does not use the listing does not wait for it. A ctx ended
// before the call is first, whether or not the listing ended: a select
// would pick between the two at random.
func (l *aheadListing) wait(ctx context.Context, prefixes []string) (found map[string]BlobInfo, complete, ok bool) {
	if l == nil || !slices.Contains(prefixes, l.prefix) || ctx.Err() != nil {
		return nil, false, false
	}
	select {
	case <-l.done:
		return l.found, l.complete, l.found != nil
	case <-ctx.Done():
		return nil, false, false
	}
}

// at returns l for a decision on the record read at version read: l if
// that is the version l was started at, else nil (no evidence).
func (l *aheadListing) at(read string) *aheadListing {
	if l == nil || read != l.version {
		return nil
	}
	return l
}

// stop ends the listing and waits for it; nil does nothing.
func (l *aheadListing) stop() {
	if l != nil {
		l.cancel()
		<-l.done
	}
}
