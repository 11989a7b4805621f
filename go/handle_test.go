package pdkv

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// closing reports whether Close has begun on h (white-box: the test waits for it).
func closing[T any](h *handle[T]) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}

// within fails the test when f does not return within d (a deadlock would hang forever).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v (deadlock)", what, d)
	}
}

// TestSecondAcquireWhileCloseWaits is the sequence that deadlocked with a sync.RWMutex: a call
// holds the handle, Close starts waiting, and the same call acquires the handle again (as
// m.Equal(m) does). The second acquire must not block: it reports ErrClosed; Close frees the
// object once the call releases its first acquire, and not before.
func TestSecondAcquireWhileCloseWaits(t *testing.T) {
	m := nano(t)
	md := nanoMetadata(t, m, 2, 0, "e", 1<<40)
	p, err := md.h.acquire()
	must(t, err)
	closed := make(chan struct{})
	go func() {
		_ = md.Close()
		close(closed)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !closing(&md.h) {
		if time.Now().After(deadline) {
			t.Fatal("Close never started")
		}
		time.Sleep(time.Millisecond)
	}
	within(t, 5*time.Second, "second acquire of the same handle", func() {
		_, err := md.h.acquire()
		wantErr(t, err, ErrClosed)
	})
	select {
	case <-closed:
		t.Fatal("Close freed the object while a call was using it")
	case <-time.After(50 * time.Millisecond):
	}
	if md.h.ptr != p {
		t.Fatal("pointer changed while in use")
	}
	md.h.release()
	within(t, 5*time.Second, "Close after the last release", func() { <-closed })
	_, err = md.Info()
	wantErr(t, err, ErrClosed)
	must(t, md.Close()) // idempotent
}

// TestSameHandleTwiceRacingClose runs calls that take the same handle twice (x.Equal(x),
// NewMambaReads(g, g, ...), HandshakeValidate(x, x), an engine-rank list repeating x)
// concurrently with Close, under -race in CI: no deadlock, and every call either succeeds or
// returns ErrClosed.
func TestSameHandleTwiceRacingClose(t *testing.T) {
	m := nano(t)
	for round := 0; round < 30; round++ {
		md := nanoMetadata(t, m, 2, 0, "e", 1<<40)
		g := geometry(t, m, 2)
		calls := []func() error{
			func() error {
				eq, err := md.Equal(md)
				if err == nil && !eq {
					return errors.New("x.Equal(x) is false")
				}
				return err
			},
			func() error { _, err := HandshakeValidate(md, md); return err },
			func() error {
				// One engine against itself is incompatible (same engine id): that error is
				// the right answer; anything else is not.
				if err := HandshakeRequireCompatible(md, md); !errors.Is(err, ErrIncompatible) {
					return err
				}
				return nil
			},
			func() error { _, err := HandshakeValidateEngineRanks([]*EngineMetadata{md, md}); return err },
			func() error {
				l, err := NewMambaReads(g, g, 1, MambaReadsPdkv)
				if err == nil {
					_ = l.Close()
				}
				return err
			},
			func() error { _, err := md.Info(); return err },
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 64)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				<-start
				for k := 0; ; k++ {
					err := calls[(w+k)%len(calls)]()
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		close(start)
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		within(t, 20*time.Second, "Close racing same-handle-twice calls", func() {
			var cw sync.WaitGroup
			cw.Add(2)
			go func() { defer cw.Done(); _ = md.Close() }()
			go func() { defer cw.Done(); _ = g.Close() }()
			cw.Wait()
			wg.Wait()
		})
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if md.h.inFlight != 0 || g.h.inFlight != 0 {
			t.Fatalf("in flight after close: %d, %d", md.h.inFlight, g.h.inFlight)
		}
	}
}

// TestClosedErrorsNameTheHandleType checks every handle type's closed error (a zero-value handle
// acquires like a closed one): a *Error of StatusNullPointer matching ErrClosed and
// ErrNullPointer whose message is "pdkv.<Type> is closed", as Python's ClosedError.
func TestClosedErrorsNameTheHandleType(t *testing.T) {
	cases := []struct {
		typeName string
		call     func() error
	}{
		{"Model", func() error { _, err := (&Model{}).Describe(); return err }},
		{"Geometry", func() error { _, err := (&Geometry{}).Info(); return err }},
		{"TpMapping", func() error { _, err := (&TpMapping{}).Info(); return err }},
		{"MambaReadList", func() error { _, err := (&MambaReadList{}).Items(); return err }},
		{"DescriptorList", func() error { _, err := (&DescriptorList{}).Items(); return err }},
		{"EngineMetadata", func() error { _, err := (&EngineMetadata{}).Info(); return err }},
		{"GroupTrim", func() error { _, err := (&GroupTrim{}).Runs(); return err }},
		{"PlanContext", func() error { _, err := (&PlanContext{}).Mapping(); return err }},
		{"TransferPlan", func() error { _, err := (&TransferPlan{}).Info(); return err }},
	}
	for _, c := range cases {
		err := c.call()
		wantErr(t, err, ErrClosed)
		var pe *Error
		if !errors.As(err, &pe) || pe.Message != "pdkv."+c.typeName+" is closed" {
			t.Errorf("%s: closed error %v", c.typeName, err)
		}
		if want := "pdkv: PDKV_ERR_NULL_POINTER: pdkv." + c.typeName + " is closed"; err.Error() != want {
			t.Errorf("%s: Error() = %q, want %q", c.typeName, err.Error(), want)
		}
	}
	// A closed handle passed as an argument names its own type.
	m := nano(t)
	g, err := NewGeometry(m, EngineConfig{TpSize: 2})
	must(t, err)
	must(t, g.Close())
	_, err = NewMambaReads(g, g, 0, MambaReadsPdkv)
	wantErr(t, err, ErrClosed, "pdkv.Geometry is closed")
}
