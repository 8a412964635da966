package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/writefence/writefence/internal/fakeclock"
)

// TestClock: a zero Clock reads Start; Advance and Set move it, from any
// number of goroutines at once (run it with -race).
func TestClock(t *testing.T) {
	var c fakeclock.Clock
	if !c.Now().Equal(fakeclock.Start) {
		t.Fatalf("a zero Clock reads %v", c.Now())
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), fakeclock.Start.Add(1600*time.Second); !got.Equal(want) {
		t.Errorf("after 1,600 advances of a second: %v, want %v", got, want)
	}
	c.Advance(-time.Hour)
	if got, want := c.Now(), fakeclock.Start.Add(1600*time.Second-time.Hour); !got.Equal(want) {
		t.Errorf("moved back an hour: %v, want %v", got, want)
	}
	for _, at := range []time.Time{
		time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC),
		time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC), // past what Unix nanoseconds hold
	} {
		c.Set(at)
		if !c.Now().Equal(at) {
			t.Errorf("set to %v: reads %v", at, c.Now())
		}
	}
}
