package neigh

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kernel answers a Resolver's requests as rtnetlink would, from a route
// and a neighbour table whose states a test script sets.
type kernel struct {
	mu       sync.Mutex
	rt       route
	routeErr unix.Errno
	states   map[netip.Addr][]uint16 // successive answers; the last repeats; none: ENOENT
	useErr   unix.Errno
	asked    []string // "route", "neigh ADDR", "use ADDR"
	pending  [][]byte
}

func addrAttr(r reply, typ uint16, skip int) netip.Addr {
	var a netip.Addr
	r.attrs(skip, func(t uint16, data []byte) {
		if t == typ {
			a, _ = netip.AddrFromSlice(data)
		}
	})
	return a
}

func (k *kernel) send(b []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	msgs, err := splitReplies(b)
	if err != nil || len(msgs) != 1 {
		return unix.EINVAL
	}
	q := msgs[0]
	errMsg := func(e unix.Errno) []byte {
		m := newRequest(unix.NLMSG_ERROR, 0, q.Seq)
		order.PutUint32(m.fixed(sizeofNlMsgerr), negErrno(e))
		return m.bytes()
	}
	switch q.Type {
	case unix.RTM_GETROUTE:
		k.asked = append(k.asked, "route")
		if k.routeErr != 0 {
			k.pending = append(k.pending, errMsg(k.routeErr))
			break
		}
		m := newRequest(unix.RTM_NEWROUTE, 0, q.Seq)
		(&rtMsg{Family: unix.AF_INET6, Type: k.rt.typ}).Encode(m.fixed(sizeofRtMsg))
		m.u32(unix.RTA_OIF, uint32(k.rt.oif))
		if k.rt.gateway.IsValid() {
			m.attr(unix.RTA_GATEWAY, k.rt.gateway.AsSlice())
		}
		k.pending = append(k.pending, m.bytes())
	case unix.RTM_GETNEIGH:
		a := addrAttr(q, unix.NDA_DST, sizeofNdMsg)
		k.asked = append(k.asked, "neigh "+a.String())
		st := k.states[a]
		if len(st) == 0 {
			k.pending = append(k.pending, errMsg(unix.ENOENT))
			break
		}
		m := newRequest(unix.RTM_NEWNEIGH, 0, q.Seq)
		(&ndMsg{Family: family(a), Ifindex: 2, State: st[0]}).Encode(m.fixed(sizeofNdMsg))
		if len(st) > 1 {
			k.states[a] = st[1:]
		}
		k.pending = append(k.pending, m.bytes())
	case unix.RTM_NEWNEIGH:
		a := addrAttr(q, unix.NDA_DST, sizeofNdMsg)
		k.asked = append(k.asked, "use "+a.String())
		k.pending = append(k.pending, errMsg(k.useErr))
	default:
		return unix.EINVAL
	}
	return nil
}

func negErrno(e unix.Errno) uint32 {
	v := -int32(e)
	return uint32(v)
}

func (k *kernel) recv(b []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.pending) == 0 {
		return 0, unix.EAGAIN
	}
	n := copy(b, k.pending[0])
	k.pending = k.pending[1:]
	return n, nil
}

func (k *kernel) close() error { return nil }

var (
	src = netip.MustParseAddr("fe80::1")
	dst = netip.MustParseAddr("fe80::2")
	gw  = netip.MustParseAddr("fe80::fe")
)

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		name   string
		k      *kernel
		limit  time.Duration
		failed bool // ErrFailed
		ok     bool
		asked  []string
	}{
		{name: "valid already", ok: true,
			k:     &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2}, states: map[netip.Addr][]uint16{dst: {unix.NUD_STALE}}},
			asked: []string{"route", "neigh fe80::2"}},
		{name: "local destination", ok: true,
			k:     &kernel{rt: route{typ: unix.RTN_LOCAL, oif: 1}},
			asked: []string{"route"}},
		{name: "resolved after the kick", ok: true,
			k: &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2},
				states: map[netip.Addr][]uint16{dst: {unix.NUD_FAILED, unix.NUD_INCOMPLETE, unix.NUD_INCOMPLETE, unix.NUD_REACHABLE}}},
			asked: []string{"route", "neigh fe80::2", "use fe80::2", "neigh fe80::2", "neigh fe80::2", "neigh fe80::2"}},
		{name: "through a gateway", ok: true,
			k: &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2, gateway: gw},
				states: map[netip.Addr][]uint16{gw: {unix.NUD_INCOMPLETE, unix.NUD_DELAY}}},
			asked: []string{"route", "neigh fe80::fe", "use fe80::fe", "neigh fe80::fe"}},
		{name: "fails", failed: true,
			k: &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2},
				states: map[netip.Addr][]uint16{dst: {unix.NUD_NONE, unix.NUD_INCOMPLETE, unix.NUD_FAILED}}},
			asked: []string{"route", "neigh fe80::2", "use fe80::2", "neigh fe80::2", "neigh fe80::2"}},
		{name: "never resolves", failed: true, limit: 20 * time.Millisecond,
			k: &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2},
				states: map[netip.Addr][]uint16{dst: {unix.NUD_INCOMPLETE}}}},
		{name: "no route",
			k:     &kernel{routeErr: unix.ENETUNREACH},
			asked: []string{"route"}},
		{name: "kick refused",
			k: &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2}, useErr: unix.EPERM,
				states: map[netip.Addr][]uint16{dst: {unix.NUD_INCOMPLETE}}},
			asked: []string{"route", "neigh fe80::2", "use fe80::2"}},
	} {
		r := newResolver(c.k)
		limit := c.limit
		if limit == 0 {
			limit = 10 * time.Second
		}
		err := r.Resolve(context.Background(), 2, src, dst, limit)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.failed && !(errors.Is(err, ErrFailed) && errors.Is(err, unix.ETIMEDOUT)):
			t.Errorf("%s: %v, want ErrFailed and ETIMEDOUT", c.name, err)
		case !c.ok && !c.failed && (err == nil || errors.Is(err, ErrFailed)):
			t.Errorf("%s: %v, want an error other than ErrFailed", c.name, err)
		}
		if c.asked != nil && !slices.Equal(c.k.asked, c.asked) {
			t.Errorf("%s: asked %q, want %q", c.name, c.k.asked, c.asked)
		}
	}
}

func TestResolveEndsWithContext(t *testing.T) {
	k := &kernel{rt: route{typ: unix.RTN_UNICAST, oif: 2}, states: map[netip.Addr][]uint16{dst: {unix.NUD_INCOMPLETE}}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := newResolver(k).Resolve(ctx, 2, src, dst, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the context's deadline", err)
	}
}

func TestResolveFamiliesDiffer(t *testing.T) {
	k := &kernel{}
	err := newResolver(k).Resolve(context.Background(), 2, netip.MustParseAddr("10.0.0.1"), dst, time.Second)
	if !errors.Is(err, unix.EINVAL) || len(k.asked) != 0 {
		t.Fatalf("%v (asked %q), want EINVAL before any request", err, k.asked)
	}
}

// A late answer to a request that timed out is not taken for the next
// request's.
func TestStaleAnswerSkipped(t *testing.T) {
	k := &kernel{rt: route{typ: unix.RTN_LOCAL, oif: 1}}
	r := newResolver(k)
	stale := newRequest(unix.NLMSG_ERROR, 0, 99)
	order.PutUint32(stale.fixed(sizeofNlMsgerr), negErrno(unix.EPERM))
	k.pending = append(k.pending, stale.bytes())
	if err := r.Resolve(context.Background(), 1, netip.Addr{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestClosed(t *testing.T) {
	r := newResolver(&kernel{})
	r.Close()
	if err := r.Resolve(context.Background(), 1, netip.Addr{}, dst, time.Second); err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// The real kernel: a local address needs no neighbour.
func TestResolveLocal(t *testing.T) {
	r, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lo := 1 // the loopback device is always ifindex 1
	addr := netip.MustParseAddr("127.0.0.1")
	if err := r.Resolve(context.Background(), lo, addr, addr, time.Second); err != nil {
		t.Fatal(err)
	}
}
