// Package neigh has the kernel resolve a RoCE peer's link-layer address
// through rtnetlink, and waits for it without holding anything else.
//
// On RoCE, umad's write() resolves the destination's MAC itself before it
// sends (rdma_addr_find_l2_eth_by_grh: a route lookup from the source
// GID's address on its netdev, then the next hop's neighbour entry), and
// waits up to a second inside the call when the entry is not valid yet.
// The kernel's CM did that once per connection, in the caller's context;
// ucmd's sends share a few umad files, so a peer nobody answers for would
// hold one of them. Resolver does the same lookup first, from the caller's
// goroutine, and starts the resolution the way a packet to the peer would
// (NTF_USE): a write that follows finds the entry valid and does not wait.
package neigh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrFailed: the kernel could not resolve the next hop (its neighbour
// entry went FAILED, or stayed unresolved for the whole wait). Errors
// from Resolve that are not ErrFailed mean rtnetlink could not tell.
var ErrFailed = errors.New("no link-layer address")

// nudValid is NUD_VALID: states in which the kernel uses the entry's
// address (a STALE entry is used and checked again afterwards).
const nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY

// Polling the entry: the first look soon after the kick (a peer on the
// same link answers in well under a millisecond), then less often.
const (
	firstPoll = 500 * time.Microsecond
	maxPoll   = 50 * time.Millisecond
)

// recvTimeout bounds one wait for the kernel's answer, which comes at once.
const recvTimeout = 2 * time.Second

// Resolver is one rtnetlink socket; its requests are one at a time, each
// answered at once, so callers waiting for entries do not hold it.
type Resolver struct {
	mu     sync.Mutex
	t      transport
	seq    uint32
	buf    []byte
	closed bool
}

// transport is the socket; tests answer for the kernel.
type transport interface {
	send(b []byte) error
	recv(b []byte) (int, error)
	close() error
}

type socket int

func (s socket) send(b []byte) error {
	return unix.Sendto(int(s), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

func (s socket) recv(b []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(int(s), b, 0)
		if err != unix.EINTR {
			return n, err
		}
	}
}

func (s socket) close() error { return unix.Close(int(s)) }

// Open opens the rtnetlink socket.
func Open() (*Resolver, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("rtnetlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rtnetlink socket receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rtnetlink bind: %w", err)
	}
	return newResolver(socket(fd)), nil
}

func newResolver(t transport) *Resolver { return &Resolver{t: t, buf: make([]byte, 8192)} }

// Close closes the socket; requests after it fail.
func (r *Resolver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.t.close()
}

// Resolve returns nil once the kernel holds a valid link-layer address
// for the next hop from src to dst out of the interface oif (or needs
// none: a local destination), an error wrapping ErrFailed and ETIMEDOUT
// if the entry failed or was not valid within limit, ctx's error if ctx
// ends first, and another error when rtnetlink could not tell (no route,
// no permission to start a resolution, a kernel without single-entry
// neighbour lookups).
func (r *Resolver) Resolve(ctx context.Context, oif int, src, dst netip.Addr, limit time.Duration) error {
	if src.IsValid() && src.Is4() != dst.Is4() {
		return fmt.Errorf("resolve %v from %v: address families differ: %w", dst, src, unix.EINVAL)
	}
	rt, err := r.route(oif, src, dst)
	if err != nil {
		return fmt.Errorf("route to %v from %v on ifindex %d: %w", dst, src, oif, err)
	}
	if rt.typ == unix.RTN_LOCAL {
		return nil
	}
	hop := dst
	if rt.gateway.IsValid() {
		hop = rt.gateway
	}
	if rt.oif != 0 {
		oif = rt.oif
	}
	state, err := r.neigh(oif, hop)
	if err != nil {
		return fmt.Errorf("neighbour %v on ifindex %d: %w", hop, oif, err)
	}
	if state&nudValid != 0 {
		return nil
	}
	if err := r.use(oif, hop); err != nil {
		return fmt.Errorf("start resolving neighbour %v on ifindex %d: %w", hop, oif, err)
	}
	return r.await(ctx, oif, hop, limit)
}

// await polls the entry of hop, whose resolution was started, until it is
// valid or FAILED, or limit has passed.
func (r *Resolver) await(ctx context.Context, oif int, hop netip.Addr, limit time.Duration) error {
	start := time.Now()
	t := time.NewTimer(min(firstPoll, limit))
	defer t.Stop()
	for wait := firstPoll; ; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		state, err := r.neigh(oif, hop)
		if err != nil {
			return fmt.Errorf("neighbour %v on ifindex %d: %w", hop, oif, err)
		}
		switch {
		case state&nudValid != 0:
			return nil
		case state&unix.NUD_FAILED != 0:
			return fmt.Errorf("neighbour %v on ifindex %d FAILED after %v: %w: %w",
				hop, oif, time.Since(start).Round(time.Millisecond), ErrFailed, unix.ETIMEDOUT)
		}
		left := limit - time.Since(start)
		if left <= 0 {
			return fmt.Errorf("neighbour %v on ifindex %d still unresolved after %v: %w: %w", hop, oif, limit, ErrFailed, unix.ETIMEDOUT)
		}
		wait = min(2*wait, maxPoll)
		t.Reset(min(wait, left))
	}
}

func (r *Resolver) route(oif int, src, dst netip.Addr) (route, error) {
	var rt route
	err := r.exchange(func(seq uint32) []byte { return routeRequest(seq, oif, src, dst) }, func(a reply) (err error) {
		if a.Type != unix.RTM_NEWROUTE {
			return fmt.Errorf("answer of type %d to a route request: %w", a.Type, unix.EBADMSG)
		}
		rt, err = parseRoute(a)
		return err
	})
	return rt, err
}

// neigh is the entry's state; NUD_NONE when there is none.
func (r *Resolver) neigh(ifindex int, addr netip.Addr) (uint16, error) {
	var state uint16
	err := r.exchange(func(seq uint32) []byte { return neighRequest(seq, ifindex, addr) }, func(a reply) (err error) {
		if a.Type != unix.RTM_NEWNEIGH {
			return fmt.Errorf("answer of type %d to a neighbour request: %w", a.Type, unix.EBADMSG)
		}
		state, err = parseNeigh(a)
		return err
	})
	if errors.Is(err, unix.ENOENT) {
		return unix.NUD_NONE, nil
	}
	return state, err
}

func (r *Resolver) use(ifindex int, addr netip.Addr) error {
	return r.exchange(func(seq uint32) []byte { return useRequest(seq, ifindex, addr) }, nil)
}

// exchange sends one request and hands its answer to f; an error message
// is returned as its errno, an acknowledgement (f nil) as nil.
func (r *Resolver) exchange(req func(seq uint32) []byte, f func(reply) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("rtnetlink: %w", net.ErrClosed)
	}
	r.seq++
	seq := r.seq
	if err := r.t.send(req(seq)); err != nil {
		return fmt.Errorf("rtnetlink send: %w", err)
	}
	for {
		n, err := r.t.recv(r.buf)
		if err != nil {
			// EAGAIN: no answer within recvTimeout. A late one is told
			// from the next request's by its sequence number.
			return fmt.Errorf("rtnetlink receive: %w", err)
		}
		msgs, err := splitReplies(r.buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Seq != seq {
				continue // an answer to a request that timed out
			}
			if m.Type == unix.NLMSG_ERROR {
				e, err := m.errno()
				if err != nil {
					return err
				}
				if e != 0 {
					return e
				}
				if f == nil {
					return nil
				}
				return fmt.Errorf("acknowledgement without an answer: %w", unix.EBADMSG)
			}
			if f == nil {
				continue
			}
			return f(m)
		}
	}
}
