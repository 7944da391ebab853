package trace

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/internal/status"
)

// resolver turns records into Events on a subscriber's goroutine: the
// local port's addresses and P_Key from the port's attributes, and the
// owning process from the ucm ids. Both are cached; a miss re-reads them
// once for every MAD observed after the last read, so a burst of MADs
// costs one read.
type resolver struct {
	ports map[portKey]*portInfo

	tables map[string]*ownerTable // by device
	// seen remembers what was resolved, so that a connection's last MADs
	// (its id destroyed, in timewait) still name its process.
	seen map[commKey]Owner
	// forgot is the hub's Forget count the caches above were made under:
	// a device retired since may be in them. They are rebuilt on demand.
	forgot uint64
}

type portKey struct {
	dev  string
	port int
}

type portInfo struct {
	seq  uint64
	read time.Time // the time of the MAD it was read for
	attr hw.PortAttr
	err  error
}

// portAttrAge is how long a port's attributes stand for the trace before
// they are read again: the subnet manager may give the port another LID,
// and a GID may change at the same index. (Reading them is cheap: the
// device layer caches them, as long.)
const portAttrAge = 5 * time.Second

type commKey struct {
	dev  string
	comm uint32
}

const maxSeen = 1 << 16

func (rs *resolver) port(h *Hub, r *record, need func(*hw.PortAttr) bool) *hw.PortAttr {
	if rs.ports == nil {
		rs.ports = make(map[portKey]*portInfo)
	}
	k := portKey{r.dev.Name(), r.port}
	pi := rs.ports[k]
	if pi == nil || (pi.seq < r.seq && (pi.err != nil || !need(&pi.attr) || r.time.Sub(pi.read) >= portAttrAge)) {
		pi = &portInfo{seq: h.seq.Load(), read: r.time}
		pi.err = errNoPort
		for _, p := range r.dev.Ports() {
			if p.Num() == r.port {
				pi.attr, pi.err = p.Attr()
			}
		}
		rs.ports[k] = pi
	}
	if pi.err != nil {
		return nil
	}
	return &pi.attr
}

type noPort struct{}

func (noPort) Error() string { return "trace: no such port" }

var errNoPort error = noPort{}

func gidString(g hw.GID) string {
	a := netip.AddrFrom16(g)
	if a.Is4In6() {
		return a.Unmap().String()
	}
	return a.String()
}

// event builds the Event of r and decodes its MAD.
func (rs *resolver) event(h *Hub, r *record) (Event, Message) {
	if f := h.forgot.Load(); f != rs.forgot {
		rs.ports, rs.tables, rs.forgot = nil, nil, f
	}
	ev := Event{
		Time: r.time, Dev: r.dev.Name(), Port: r.port, Dir: r.dir.String(), Reason: r.reason,
		MAD:    append([]byte(nil), r.mad[:]...),
		Local:  Endpoint{QPN: 1},
		Remote: Endpoint{LID: r.peer.LID, QPN: r.peer.QPN},
		SL:     r.peer.SL,
	}
	if r.hasGRH {
		ev.Remote.GID = gidString(r.grh.GID)
		ev.GRH = &GRH{TrafficClass: r.grh.TrafficClass, FlowLabel: r.grh.FlowLabel, HopLimit: r.grh.HopLimit}
	}
	pkeyIdx, sgidIdx := int(r.peer.PKeyIndex), int(r.grh.SGIDIndex)
	a := rs.port(h, r, func(a *hw.PortAttr) bool {
		if pkeyIdx >= len(a.PKeys) {
			return false
		}
		if r.hasGRH {
			for _, g := range a.GIDs {
				if g.Index == sgidIdx {
					return true
				}
			}
			return false
		}
		return true
	})
	if a != nil {
		ev.Link = LinkIB
		if a.LinkLayer == hw.LinkEthernet {
			ev.Link = LinkRoCE
		}
		ev.Local.LID = a.LID | uint16(r.peer.PathBits)
		if pkeyIdx < len(a.PKeys) {
			ev.PKey = a.PKeys[pkeyIdx]
		}
		if r.hasGRH {
			for _, g := range a.GIDs {
				if g.Index == sgidIdx {
					ev.Local.GID = gidString(g.GID)
				}
			}
		}
	}
	msg := ev.Decode()
	if o, ok := rs.owner(h, r, &msg); ok {
		ev.PID, ev.Comm = o.PID, o.Comm
		ev.ServiceID = status.Hex64(o.ServiceID)
	}
	if msg.ServiceID != 0 {
		ev.ServiceID = status.Hex64(msg.ServiceID)
	}
	return ev, msg
}

// owner finds the id that is the local end of the MAD: by the local comm
// id, by the remote one (a REJ of a REQ carries no local comm id), and for
// an inbound REQ or SIDR_REQ the listener of its service id.
func (rs *resolver) owner(h *Hub, r *record, m *Message) (Owner, bool) {
	if m.Msg == nil {
		return Owner{}, false
	}
	dev := r.dev.Name()
	if rs.tables == nil {
		rs.tables = make(map[string]*ownerTable)
	}
	t := rs.tables[dev]
	inbound := r.dir == cmcore.MADReceived || r.dir == cmcore.MADDropped
	o, ok := t.look(m, inbound)
	if !ok && (t == nil || t.seq < r.seq) {
		t = h.ownerTable(dev, r.seq)
		rs.tables[dev] = t
		o, ok = t.look(m, inbound)
	}
	if ok {
		rs.remember(dev, m, o)
		return o, true
	}
	for _, c := range []uint32{m.LocalCommID, m.RemoteCommID} {
		if c == 0 {
			continue
		}
		if o, ok := rs.seen[commKey{dev, c}]; ok {
			return o, true
		}
	}
	return Owner{}, false
}

// ownerTable is one device's ids, read at hub sequence number seq.
type ownerTable struct {
	seq       uint64
	byLocal   map[uint32]Owner
	byRemote  map[uint32]Owner
	listeners map[uint64]Owner
}

func (t *ownerTable) look(m *Message, inbound bool) (Owner, bool) {
	if t == nil {
		return Owner{}, false
	}
	if m.LocalCommID != 0 {
		if o, ok := t.byLocal[m.LocalCommID]; ok {
			return o, true
		}
	}
	if m.RemoteCommID != 0 {
		if o, ok := t.byRemote[m.RemoteCommID]; ok {
			return o, true
		}
	}
	if m.ServiceID != 0 && inbound {
		if o, ok := t.listeners[m.ServiceID]; ok {
			return o, true
		}
	}
	return Owner{}, false
}

// ownerCache is one device's table of owners, shared by the subscribers.
type ownerCache struct {
	mu sync.Mutex
	t  *ownerTable
}

// maxOwnerWait bounds how long a subscriber waits for the next read.
const maxOwnerWait = time.Second

// ownerTable is dev's table as read after the MAD with hub sequence number
// seq. A read walks every id of the device under its files' locks (7 ms
// at 60,000 ids) and a MAD whose comm id no id has (a connection newer
// than the table, or a peer's MADs naming random ids) asks for one: so
// the subscribers share the table, and the reads of every device are
// spaced together (package pace, the hub's spacer: it outlives the tables,
// which go with the last subscriber), which keeps them to about a tenth
// of a CPU however many MADs miss and however many traces come and go. A
// subscriber that waits falls behind, and loses MADs when its buffer
// fills, not the CM.
func (h *Hub) ownerTable(dev string, seq uint64) *ownerTable {
	h.omu.Lock()
	c := h.otables[dev]
	if c == nil {
		c = &ownerCache{}
		h.otables[dev] = c
	}
	h.omu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t != nil && c.t.seq >= seq {
		return c.t
	}
	h.pmu.Lock()
	h.pace.Run(maxOwnerWait, func() { c.t = readOwners(h, dev) })
	h.pmu.Unlock()
	return c.t
}

func readOwners(h *Hub, dev string) *ownerTable {
	t := &ownerTable{
		seq:     h.seq.Load(),
		byLocal: make(map[uint32]Owner), byRemote: make(map[uint32]Owner), listeners: make(map[uint64]Owner),
	}
	for _, o := range h.owners(dev) {
		if o.Listening {
			t.listeners[o.ServiceID] = o
			continue
		}
		if o.LocalCommID != 0 {
			t.byLocal[o.LocalCommID] = o
		}
		if o.RemoteCommID != 0 {
			t.byRemote[o.RemoteCommID] = o
		}
	}
	return t
}

func (rs *resolver) remember(dev string, m *Message, o Owner) {
	if rs.seen == nil || len(rs.seen) >= maxSeen {
		rs.seen = make(map[commKey]Owner)
	}
	if o.Listening {
		return // the connection's own id will be found once it exists
	}
	for _, c := range []uint32{m.LocalCommID, m.RemoteCommID} {
		if c != 0 {
			rs.seen[commKey{dev, c}] = o
		}
	}
}
