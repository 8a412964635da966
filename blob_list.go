package writefence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// ConsistentBlobLister is an optional capability of a BlobStore, used
// through StatBlobs: a listing a Commit can check its new blobs by, one
// request a thousand blobs on S3 and GCS.
type ConsistentBlobLister interface {
	// ListBlobsConsistent is ListBlobs, that also lists every blob whose
	// CreateBlob returned before the call began and no blob whose
	// DeleteBlob did, with StatBlob's Size and Modified. A store whose
	// listing may lag behind its writes must not declare it.
	ListBlobsConsistent(ctx context.Context, prefix string, fn func(BlobInfo) error) error
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
// share is listed once, over at most max(1000, 2 × its keys) blobs; the
// other keys are checked with StatBlob, 16 at a time. The first failure
// other than ErrNotFound ends the call. Commit checks its new blobs with it.
func StatBlobs(ctx context.Context, s ConditionalStore, prefixes, keys []string) (map[string]BlobInfo, error) {
	return statBlobs(ctx, s, prefixes, keys, nil)
}

// statBlobs is StatBlobs, told of others: how many blobs other than keys
// are known to be under a prefix (a commit knows the blobs of an epoch its
// record references already). A prefix whose listing would run over its
// budget on those alone is not listed: its keys are checked with
// StatBlob. In a long epoch, where thousands of blobs share the prefix, a
// commit of a few new ones so costs their StatBlobs, never a listing of
// a thousand blobs that may not show them.
func statBlobs(ctx context.Context, s ConditionalStore, prefixes, keys []string, others map[string]int) (map[string]BlobInfo, error) {
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
	if lister, ok := capability[ConsistentBlobLister](s); ok {
		var err error
		if pending, err = listBlobs(ctx, lister, prefixes, keys, others, hook.ListBudget(ctx), found); err != nil {
			return nil, err
		}
	}
	if err := statEach(ctx, bs, pending, found); err != nil {
		return nil, err
	}
	return found, nil
}

// listBlobs lists each prefix that statListMin of keys share, unless
// others says its listing would run over its budget, records in found the
// keys it shows, and returns the keys left to stat.
func listBlobs(ctx context.Context, lister ConsistentBlobLister, prefixes, keys []string, others map[string]int, base int, found map[string]BlobInfo) ([]string, error) {
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
		if len(ks) < statListMin || others[p]+len(ks) > budget {
			rest = append(rest, ks...)
			continue
		}
		want := make(map[string]bool, len(ks))
		for _, k := range ks {
			want[k] = true
		}
		err := lister.ListBlobsConsistent(ctx, p, func(b BlobInfo) error {
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

// checkBlobs checks the blobs a commit to the record at key, by writer
// at epoch, newly references (refs; current are those the record
// references already): that each was written by writer at an
// epoch not above the commit's and not below floor, the tenure floor
// (their names say so), and that each exists with the size referenced,
// created at or after horizon, the record's collection horizon (see
// Commit). The names are checked first, which costs nothing; then the
// blobs, with StatBlobs over the prefixes of their epochs. A failure to
// read that is not a refusal is a readFailure, which the engine retries.
func (f *Fence) checkBlobs(ctx context.Context, key, space, writer string, epoch uint64, current, refs []BlobRef, floor uint64, horizon int64) error {
	var prefixes, blobKeys []string
	for _, r := range refs {
		e, _, w, ok := keys.ParseBlobName(r.Name)
		switch {
		case !ok:
			return invalidArg("blob", "%s is not a blob name", esc(r.Name))
		case w != writer:
			return invalidArg("blob", "%s was written by %s, not %s", esc(r.Name), esc(w), esc(writer))
		case e > epoch:
			return invalidArg("blob", "%s was written at epoch %d, above the commit's %d", esc(r.Name), e, epoch)
		case e < floor:
			return invalidArg("blob", "%s was written at epoch %d, before the tenure that began at epoch %d", esc(r.Name), e, floor)
		}
		if p := space + keys.BlobEpochPrefix(e); !slices.Contains(prefixes, p) {
			prefixes = append(prefixes, p)
		}
		blobKeys = append(blobKeys, space+r.Name)
	}
	if len(refs) == 0 {
		return nil
	}
	others := map[string]int{}
	for _, r := range current {
		if e, _, _, ok := keys.ParseBlobName(r.Name); ok {
			others[space+keys.BlobEpochPrefix(e)]++
		}
	}
	store := f.blobStore()
	found, err := statBlobs(ctx, store, prefixes, blobKeys, others)
	switch {
	case err != nil && !final(err):
		// A read like any other: retried after a back-off.
		return readFailure{fmt.Errorf("blobs: %w", err)}
	case err != nil:
		return fmt.Errorf("writefence: commit %s: blobs: %w", esc(key), err)
	}
	for _, r := range refs {
		info, ok := found[space+r.Name]
		switch {
		case !ok:
			return fmt.Errorf("writefence: commit %s: blob %s does not exist: %w", esc(key), esc(r.Name), ErrNotFound)
		case info.Size != r.Size:
			return invalidArg("blob", "%s holds %d bytes, its reference says %d", esc(r.Name), info.Size, r.Size)
		case horizon != 0 && info.Modified.UnixNano() < horizon:
			return fmt.Errorf("writefence: commit %s: blob %s was created at %s, before the collection horizon %s, and is garbage: put it again: %w",
				esc(key), esc(r.Name), info.Modified.UTC().Format(time.RFC3339Nano), time.Unix(0, horizon).UTC().Format(time.RFC3339Nano), ErrNotFound)
		}
	}
	return nil
}
