package cmcore

import (
	"errors"
	"testing"
	"time"

	"github.com/ucmd/ucmd/hw"
)

// TestReceiveError: a port whose endpoint fails a read (a removed device's
// umad file answers EIO) reports why it stopped; a running port and one
// closed at shutdown report nothing.
func TestReceiveError(t *testing.T) {
	h := newHarness(t)
	if err := h.cm.ReceiveError(1); err != nil {
		t.Fatalf("running port: ReceiveError = %v", err)
	}
	if err := h.cm.ReceiveError(2); err != nil {
		t.Fatalf("no such port: ReceiveError = %v", err)
	}
	if h.cm.Stopped() {
		t.Fatal("Stopped with its port receiving")
	}
	eio := errors.New("read /dev/infiniband/umad0: input/output error")
	h.port.ep.fail <- eio
	// The receive loop takes the error on its own goroutine.
	for deadline := time.Now().Add(10 * time.Second); h.cm.ReceiveError(1) == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ReceiveError still nil after the endpoint failed")
		}
	}
	if err := h.cm.ReceiveError(1); !errors.Is(err, eio) {
		t.Fatalf("ReceiveError = %v, want %v", err, eio)
	}
	if !h.cm.Stopped() {
		t.Error("not Stopped with its only port stopped")
	}

	h2 := newHarness(t)
	h2.cm.Close()
	if err := h2.cm.ReceiveError(1); err != nil {
		t.Fatalf("after Close: ReceiveError = %v", err)
	}
	if h2.cm.Stopped() {
		t.Error("Stopped after a shutdown, which is no failure")
	}
}

// Options.OnReceiveError hears of a port that stopped, once, with why.
func TestOnReceiveError(t *testing.T) {
	dev := &fakeDev{guid: localGUID}
	p := &fakePort{dev: dev, num: 1, attr: hw.PortAttr{LinkLayer: hw.LinkInfiniBand, State: hw.PortActive, LID: localLID}}
	dev.ports = []*fakePort{p}
	type stop struct {
		port int
		err  error
	}
	heard := make(chan stop, 2)
	cm := New(dev, Options{OnReceiveError: func(port int, err error) { heard <- stop{port, err} }})
	if err := cm.Start(); err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	eio := errors.New("read /dev/infiniband/umad0: input/output error")
	p.ep.fail <- eio
	select {
	case s := <-heard:
		if s.port != 1 || !errors.Is(s.err, eio) {
			t.Errorf("OnReceiveError(%d, %v), want (1, %v)", s.port, s.err, eio)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnReceiveError not called")
	}
	cm.Close()
	if len(heard) != 0 {
		t.Errorf("called again: %+v", <-heard)
	}
}
