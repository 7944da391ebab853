package umad

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/neigh"
	"github.com/ucmd/ucmd/hw/umad/uapi"
)

// A first send to a peer never reached has its MAC resolved before it
// takes a lane: it waits for no send to an unreachable peer, and sends to
// peers that do not resolve fail without ever writing (a write would hold
// a lane for the kernel's second of resolution).
func TestFirstSendsResolveOutsideTheLanes(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	k.drainLanes(t)
	fresh := hw.GID{0xfe, 0x80, 15: 2}
	release := make(chan struct{})
	var resolving, badWrites atomic.Int32
	e.resolve = func(ctx context.Context, to destination) error {
		if to.gid == fresh {
			return nil
		}
		resolving.Add(1)
		defer resolving.Add(-1)
		<-release // a peer nobody answers for
		return fmt.Errorf("neighbour %v: %w: %w", to.gid, neigh.ErrFailed, unix.ETIMEDOUT)
	}
	e.write = func(fd int, b []byte) error {
		var h uapi.UserMADHdr
		if err := h.Decode(b); err != nil {
			return err
		}
		if hw.GID(h.GID) != fresh {
			badWrites.Add(1)
			<-release // what the kernel's write would do
			return unix.ETIMEDOUT
		}
		return writeMAD(fd, b)
	}
	to := func(g hw.GID) hw.Address { return hw.Address{QPN: 1, GRH: &hw.GRH{GID: g, HopLimit: 64}} }
	ctx := context.Background()
	bad := sendToNowhere(e, 8)
	waitCount(t, &resolving, 8, "sends to unreachable peers resolving")
	sendWithin(t, e, to(fresh), testMAD(1), "a first send to a new peer waited behind 8 sends to unreachable peers")
	close(release)
	for range 8 {
		if err := <-bad; !errors.Is(err, unix.ETIMEDOUT) || !errors.Is(err, neigh.ErrFailed) {
			t.Errorf("send to an unreachable peer: %v, want ETIMEDOUT from the resolution", err)
		}
	}
	if n := badWrites.Load(); n != 0 {
		t.Errorf("%d writes to unreachable peers, want none", n)
	}
	if resolved, _ := e.lookup(destination{gid: fresh}); !resolved {
		t.Error("the new peer is not remembered as reached after its send")
	}
	// An unreachable peer is not asked again within failedFor.
	before := resolving.Load()
	if err := e.Send(ctx, to(hw.GID{0xfe, 0x80, 14: 1, 15: 0}), testMAD(30)); !errors.Is(err, unix.ETIMEDOUT) {
		t.Errorf("send again to an unreachable peer: %v, want ETIMEDOUT", err)
	}
	if st := e.Stats(); st.Resolved != 1 || st.ResolveFailures != 8 || st.ResolveUnanswered != 0 || resolving.Load() != before {
		t.Errorf("stats %+v", st)
	}
}

// A resolution rtnetlink cannot answer falls back to the shared lanes;
// one ended by the caller's context ends the send.
func TestResolveFallbackAndContext(t *testing.T) {
	e, k := newTestEndpoint(t, hw.LinkEthernet, Options{SendFiles: 4})
	k.drainLanes(t)
	e.resolve = cannotTell
	to := hw.Address{QPN: 1, GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 5}, HopLimit: 64}}
	if err := e.Send(context.Background(), to, testMAD(1)); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.ResolveUnanswered != 1 || st.Resolved != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := e.ResolveError(); err == nil || err.Error() != "rtnetlink: no answer (test)" {
		t.Errorf("ResolveError after a send rtnetlink could not tell: %v", err)
	}
	if len(e.unresolved) != 0 {
		t.Errorf("%d shared lanes still held", len(e.unresolved))
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.resolve = func(ctx context.Context, _ destination) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	to.GRH.GID[15] = 6
	if err := e.Send(ctx, to, testMAD(2)); !errors.Is(err, context.Canceled) {
		t.Errorf("send whose context ended while resolving: %v", err)
	}
	// An InfiniBand port resolves nothing.
	ib, _ := newTestEndpoint(t, hw.LinkInfiniBand, Options{})
	ib.resolve = func(context.Context, destination) error { t.Error("resolution on InfiniBand"); return nil }
	ib.Send(context.Background(), hw.Address{LID: 3, QPN: 1}, testMAD(3))
}

func writeSysfs(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, v := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGIDSource(t *testing.T) {
	root := t.TempDir()
	port := "class/infiniband/rxe0/ports/1/"
	writeSysfs(t, root, map[string]string{
		port + "gids/3":              "0000:0000:0000:0000:0000:ffff:0a00:0001",
		port + "gid_attrs/types/3":   "RoCE v2",
		port + "gid_attrs/ndevs/3":   "veth0",
		port + "gids/0":              "fe80:0000:0000:0000:0000:00ff:fe00:0001",
		port + "gid_attrs/types/0":   "IB/RoCE v1",
		port + "gid_attrs/ndevs/0":   "veth0",
		port + "gids/4":              "fe80:0000:0000:0000:0000:00ff:fe00:0001",
		port + "gid_attrs/types/4":   "RoCE v2",
		port + "gid_attrs/ndevs/4":   "elsewhere",
		port + "gids/5":              "fe80:0000:0000:0000:0000:00ff:fe00:0001",
		port + "gid_attrs/types/5":   "RoCE v2",
		port + "gid_attrs/ndevs/5":   "..",
		"class/net/veth0/ifindex":    "7",
		"class/net/veth0/address":    "02:00:00:00:00:01",
		"class/net/elsewhere/ifname": "no ifindex: another namespace's",
		// A container's macvlan named eth0, listed in the shared RDMA
		// namespace mode, and the host's own eth0 of that name.
		port + "gids/6":            "fe80:0000:0000:0000:00aa:bbff:fecc:ddee",
		port + "gid_attrs/types/6": "RoCE v2",
		port + "gid_attrs/ndevs/6": "eth0",
		"class/net/eth0/ifindex":   "2",
		"class/net/eth0/address":   "52:54:00:12:34:56",
	})
	s := sysfs{root: root}
	gid, typ, ifindex, err := s.gidSource("rxe0", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ipOf(gid) != netip.MustParseAddr("10.0.0.1") || typ != hw.GIDTypeRoCEv2 || ifindex != 7 {
		t.Errorf("GID index 3: %v (%v) %v ifindex %d", gid, ipOf(gid), typ, ifindex)
	}
	if _, typ, _, err := s.gidSource("rxe0", 1, 0); err != nil || typ != hw.GIDTypeRoCEv1 {
		t.Errorf("GID index 0: %v, %v", typ, err)
	}
	for _, i := range []uint8{1, 4, 5} {
		if _, _, _, err := s.gidSource("rxe0", 1, i); err == nil {
			t.Errorf("GID index %d: no error", i)
		}
	}
	if _, _, ifindex, err := s.gidSource("rxe0", 1, 6); err == nil || !strings.Contains(err.Error(), "another namespace's") {
		t.Errorf("a container's eth0 resolved on the host's (ifindex %d): %v", ifindex, err)
	}

	// RoCE v1 to a link-local GID: the MAC is in the GID, nothing to ask.
	e, _ := newTestEndpoint(t, hw.LinkEthernet, Options{})
	e.port.sys = s
	if err := e.resolveNeighbour(context.Background(), destination{gid: hw.GID{0xfe, 0x80, 15: 9}, sgid: 0}); err != nil {
		t.Errorf("RoCE v1 link-local: %v", err)
	}
	e.mu.Lock()
	opened := e.neigh != nil || e.neighErr != nil
	e.mu.Unlock()
	if opened {
		t.Error("rtnetlink opened for a RoCE v1 link-local peer")
	}
	// Link-local is fe80::/64 to the kernel (rdma_link_local_addr), not
	// fe80::/10: fe80:0:0:1::9's MAC is resolved as any other's.
	e.resolveNeighbour(context.Background(), destination{gid: hw.GID{0xfe, 0x80, 7: 1, 15: 9}, sgid: 0})
	e.mu.Lock()
	opened = e.neigh != nil || e.neighErr != nil
	e.mu.Unlock()
	if !opened {
		t.Error("RoCE v1 to fe80:0:0:1::9 taken for link-local: rtnetlink not asked")
	}
	// A netdev out of sight: rtnetlink cannot tell, so no ErrFailed.
	if err := e.resolveNeighbour(context.Background(), destination{gid: hw.GID{0xfe, 0x80, 15: 9}, sgid: 4}); err == nil || errors.Is(err, neigh.ErrFailed) {
		t.Errorf("netdev in another namespace: %v", err)
	}
}

// Close while a first send resolves: the send ends with ErrClosed, and the
// closed resolver is not counted as rtnetlink failing to answer.
func TestCloseWhileResolving(t *testing.T) {
	e, _ := newTestEndpoint(t, hw.LinkEthernet, Options{})
	resolving := make(chan struct{})
	e.resolve = func(context.Context, destination) error {
		close(resolving)
		<-e.done
		return errors.New("rtnetlink: use of closed network connection (test)")
	}
	errc := make(chan error, 1)
	go func() {
		errc <- e.Send(context.Background(), hw.Address{QPN: 1, GRH: &hw.GRH{GID: hw.GID{0xfe, 0x80, 15: 5}, HopLimit: 64}}, testMAD(1))
	}()
	<-resolving
	e.Close()
	if err := <-errc; !errors.Is(err, hw.ErrClosed) {
		t.Errorf("send resolving at Close: %v, want ErrClosed", err)
	}
	if st := e.Stats(); st.ResolveUnanswered != 0 || e.ResolveError() != nil {
		t.Errorf("stats %+v, error %v", st, e.ResolveError())
	}
}
