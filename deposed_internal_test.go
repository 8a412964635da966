package writefence

import (
	"context"
	"testing"
	"testing/synctest"
)

func (d *deposition) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.waiting)
}

// However a Deposed context ends, the Fence forgets it: a long-lived Fence
// does not grow with the pipelines it has served. synctest.Wait lets the
// contexts' AfterFuncs run to completion before the count is read.
func TestDeposedForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &Fence{Store: &MemStore{}}
		ctx := context.Background()
		if err := f.Seal(ctx, "wal", "0", "b", 9); err != nil {
			t.Fatal(err)
		}

		_, stop := f.Deposed(ctx, "wal", "0")
		parent, cancel := context.WithCancel(ctx)
		_, pstop := f.Deposed(parent, "wal", "0")
		defer pstop()
		refused, rstop := f.Deposed(ctx, "wal", "0")
		defer rstop()
		kept, kstop := f.Deposed(ctx, "wal", "1")
		if got := f.deposed.len(); got != 4 {
			t.Fatalf("%d contexts registered, want 4", got)
		}

		stop()
		cancel()
		if err := f.Push(ctx, "wal", "0", "a", 3, nil); err == nil {
			t.Fatal("a push below the seal landed")
		}
		synctest.Wait()
		if refused.Err() == nil {
			t.Fatal("the refusal did not cancel the shard's context")
		}
		if kept.Err() != nil {
			t.Fatal("another shard's context was cancelled")
		}
		if got := f.deposed.len(); got != 1 {
			t.Fatalf("%d contexts still registered, want 1 (the other shard's)", got)
		}
		kstop()
		synctest.Wait()
		if got := f.deposed.len(); got != 0 {
			t.Fatalf("%d contexts still registered after every one ended", got)
		}
	})
}
