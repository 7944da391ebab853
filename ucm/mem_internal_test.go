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

// A command answered already, interrupted or its file released while an
// earlier copy hung, copies no more: its caller has returned from
// write(2) and may have reused the memory.
func TestNoCopyAfterTheAnswer(t *testing.T) {
	for _, c := range []struct {
		name     string
		released bool
		want     error
	}{
		{"interrupted", false, context.Canceled},
		{"released", true, errReleased},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &countingMem{}
			f := &file{d: &Device{mem: m}, copies: &copySlots{max: 16}, all: &copySlots{max: 1024}, done: make(chan struct{})}
			ctx, cancel := context.WithCancel(context.Background())
			if c.released {
				close(f.done)
			} else {
				cancel()
			}
			defer cancel()
			k := &call{f: f, ctx: ctx, pid: 4242}
			if _, err := k.read(0x1000, 64, "primary path"); !errors.Is(err, c.want) {
				t.Errorf("read: %v, want %v", err, c.want)
			}
			if err := k.write(0x2000, make([]byte, 4), "response"); !errors.Is(err, c.want) {
				t.Errorf("write: %v, want %v", err, c.want)
			}
			if m.reads+m.writes != 0 || f.copies.state.Load() != 0 || f.all.state.Load() != 0 {
				t.Errorf("%d reads and %d writes reached the caller; slots taken %d, %d", m.reads, m.writes, f.copies.state.Load(), f.all.state.Load())
			}
		})
	}
}
