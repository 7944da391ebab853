package umad

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/hw/neigh"
)

// Resolving a RoCE peer's MAC before a first send (docs/umad.md).
//
// umad's write() resolves the destination's MAC inside the call, on the
// lane it writes, and a peer nobody answers for holds that lane about a
// second. So a send to a destination not yet reached first has the kernel
// resolve it through rtnetlink (hw/neigh), from the sender's own
// goroutine and holding no lane: the write that follows finds the MAC at
// once, or the send fails with ETIMEDOUT without having taken a lane. A
// first send to a new peer then waits for nobody else's unreachable peer.
// Where rtnetlink cannot tell (no CAP_NET_ADMIN to start a resolution, a
// netdev in another network namespace, a kernel before 5.0), the send
// takes one of the lanes shared by unresolved destinations, as before.

// resolveLimit is how long a first send waits for its peer's MAC: as long
// as umad's write() would (rdma_addr_find_l2_eth_by_grh, 1000 ms).
const resolveLimit = time.Second

// gidSource is what the kernel resolves a send's peer from: the source GID
// at the send's GID index, its type, and its netdev's interface index.
func (s sysfs) gidSource(dev string, port int, index uint8) (gid hw.GID, typ hw.GIDType, ifindex int, err error) {
	dir := s.path("infiniband", dev, "ports", strconv.Itoa(port))
	i := strconv.Itoa(int(index))
	v, err := readTrim(filepath.Join(dir, "gids", i))
	if err != nil {
		return gid, 0, 0, err
	}
	if gid, err = parseGID(v); err != nil {
		return gid, 0, 0, fmt.Errorf("gids/%s: %w", i, err)
	}
	if v, err = readTrim(filepath.Join(dir, "gid_attrs", "types", i)); err != nil {
		return gid, 0, 0, err
	}
	if typ, err = parseGIDType(v, hw.LinkEthernet); err != nil {
		return gid, 0, 0, fmt.Errorf("gid_attrs/types/%s: %w", i, err)
	}
	nd, err := readTrim(filepath.Join(dir, "gid_attrs", "ndevs", i))
	if err != nil {
		return gid, 0, 0, err
	}
	if nd == "" || nd != filepath.Base(nd) || nd == ".." {
		return gid, 0, 0, fmt.Errorf("gid_attrs/ndevs/%s: netdev name %q", i, nd)
	}
	if v, err = readTrim(s.path("net", nd, "ifindex")); err != nil {
		return gid, 0, 0, err // the netdev is in another network namespace
	}
	if ifindex, err = strconv.Atoi(v); err != nil || ifindex <= 0 {
		return gid, 0, 0, fmt.Errorf("net/%s/ifindex %q", nd, v)
	}
	// sysfs names the GID's netdev, which may be another namespace's (a
	// container's macvlan, listed in the shared RDMA namespace mode) and
	// share its name with one of ours (eth0): resolving on ours would run
	// neighbour discovery on the wrong link, and fail the send. A MAC in
	// the GID (a link-local EUI-64 one) tells; an address does not, where
	// a wrong netdev's route lookup refuses the foreign source address.
	if mac, ok := eui64MAC(gid); ok {
		if v, err = readTrim(s.path("net", nd, "address")); err == nil && !strings.EqualFold(v, mac) {
			return gid, 0, 0, fmt.Errorf("gid_attrs/ndevs/%s: netdev %s here has MAC %s, not the GID's %s: another namespace's", i, nd, v, mac)
		}
	}
	return gid, typ, ifindex, nil
}

// eui64MAC is the MAC a link-local GID was made from (the modified EUI-64
// interface identifier of RFC 4291: ff:fe in the middle, the U/L bit
// flipped), if it is one.
func eui64MAC(g hw.GID) (string, bool) {
	if !linkLocal(g) || g[11] != 0xff || g[12] != 0xfe {
		return "", false
	}
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", g[8]^0x02, g[9], g[10], g[13], g[14], g[15]), true
}

// ipOf is a RoCE GID's IP address (rdma_gid2ip): IPv4-mapped GIDs are
// IPv4 addresses.
func ipOf(g hw.GID) netip.Addr { return g.Addr().Unmap() }

// linkLocal is rdma_link_local_addr: fe80::/64, narrower than IPv6's
// fe80::/10.
func linkLocal(g hw.GID) bool {
	return g[0] == 0xfe && g[1] == 0x80 && [6]byte(g[2:8]) == [6]byte{}
}

// resolveNeighbour has the kernel resolve to's MAC. Errors wrapping
// neigh.ErrFailed mean the peer did not answer; others that rtnetlink
// could not tell.
func (e *Endpoint) resolveNeighbour(ctx context.Context, to destination) error {
	p := e.port
	src, typ, ifindex, err := p.sys.gidSource(p.dev.name, p.num, to.sgid)
	if err != nil {
		return err
	}
	if typ == hw.GIDTypeRoCEv1 && linkLocal(to.gid) {
		return nil // the kernel takes the MAC from the GID (ib_resolve_unicast_gid_dmac)
	}
	r, err := e.neighbours()
	if err != nil {
		return err
	}
	return r.Resolve(ctx, ifindex, ipOf(src), ipOf(to.gid), resolveLimit)
}

// openNeigh opens an rtnetlink socket (tests replace it).
var openNeigh = neigh.Open

// neighRetry is how long a failure to open the rtnetlink socket stands
// before the next send that needs it tries again.
const neighRetry = 10 * time.Second

// neighbours is the endpoint's rtnetlink socket, opened at first use. A
// failure is tried again after neighRetry: a passing one (EMFILE, ENOBUFS)
// would otherwise send every first send to a new peer through umad's
// resolution, holding a shared lane, for the endpoint's life.
func (e *Endpoint) neighbours() (*neigh.Resolver, error) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, hw.ErrClosed
	}
	if e.neigh == nil && (e.neighErr == nil || now.Sub(e.neighAt) >= neighRetry) {
		e.neigh, e.neighErr = openNeigh()
		e.neighAt = now
	}
	return e.neigh, e.neighErr
}
