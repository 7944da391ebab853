package sim

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/ucmd/ucmd/hw"
)

// neighbour is a RoCE port's knowledge of a peer's MAC address.
type neighbour struct {
	done   chan struct{} // closed when resolution ends
	failed bool          // set before done is closed: no port owns the GID
}

// resolve emulates what a RoCE umad write() does before the MAD leaves:
// the kernel resolves the destination GID's MAC, synchronously. With the
// Resolve knob set, the first send from a port to a GID blocks that long
// (later and concurrent ones share the result); a GID no port owns fails
// with ETIMEDOUT after the same delay, as measured on rxe, and is not
// remembered.
func (e *endpoint) resolve(ctx context.Context, dst *hw.Address) error {
	f := e.port.dev.fabric
	d := time.Duration(f.resolveDelay.Load())
	// The link layer never changes after AddDevice: no lock needed.
	if d <= 0 || dst.GRH == nil || e.port.attr.LinkLayer != hw.LinkEthernet {
		return nil
	}
	gid := dst.GRH.GID
	p := e.port
	f.mu.Lock()
	n := p.neigh[gid]
	if n == nil {
		n = &neighbour{done: make(chan struct{})}
		if p.neigh == nil {
			p.neigh = make(map[hw.GID]*neighbour)
		}
		p.neigh[gid] = n
		f.clk.AfterFunc(d, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.byGID[gid] == nil {
				n.failed = true
				if p.neigh[gid] == n {
					delete(p.neigh, gid)
				}
			}
			close(n.done)
		})
	}
	f.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.done:
		return hw.ErrClosed
	}
	if n.failed {
		return fmt.Errorf("sim: %s: send to GID %v: no answer to address resolution: %w", p, gid, syscall.ETIMEDOUT)
	}
	return nil
}

// FlushNeighbours makes every RoCE port forget the MACs it resolved, so
// that the next send to each peer blocks again (ip neigh flush).
func (f *Fabric) FlushNeighbours() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.devices {
		for _, p := range d.ports {
			clear(p.neigh)
		}
	}
}
