package ucm

import (
	"context"
	"errors"
	"testing"
)

// countingMem counts the copies that reach the caller's memory.
type countingMem struct{ reads, writes int }

func (m *countingMem) Read(int, uint64, []byte) error  { m.reads++; return nil }
func (m *countingMem) Write(int, uint64, []byte) error { m.writes++; return nil }

// A command of a released file (its channel let go while an earlier copy
// hung: the kernel has answered its caller) copies no more.
func TestNoCopyAfterRelease(t *testing.T) {
	m := &countingMem{}
	f := &file{d: &Device{mem: m}, copies: &copySlots{max: 16}, all: &copySlots{max: 1024}, done: make(chan struct{})}
	close(f.done)
	k := &call{f: f, ctx: context.Background(), pid: 4242}
	if _, err := k.read(0x1000, 64, "primary path"); !errors.Is(err, errReleased) {
		t.Errorf("read: %v, want %v", err, errReleased)
	}
	if err := k.write(0x2000, make([]byte, 4), "response"); !errors.Is(err, errReleased) {
		t.Errorf("write: %v, want %v", err, errReleased)
	}
	if m.reads+m.writes != 0 || f.copies.state.Load() != 0 || f.all.state.Load() != 0 {
		t.Errorf("%d reads and %d writes reached the caller; slots taken %d, %d", m.reads, m.writes, f.copies.state.Load(), f.all.state.Load())
	}
}
