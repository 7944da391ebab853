package trace

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ucmd/ucmd/cmcore/wire"
	"github.com/ucmd/ucmd/hw"
	"github.com/ucmd/ucmd/internal/status"
)

// Event is one CM MAD as the trace socket streams it (one JSON object per
// line), and what `ucmd trace --json` prints and `ucmd trace -r` reads.
// A line with Lost set is a marker and carries nothing else: that many
// MADs were not delivered to this subscriber (its buffer was full) at
// that point of the stream.
type Event struct {
	Time   time.Time `json:"time"`
	Dev    string    `json:"dev,omitempty"`
	Port   int       `json:"port,omitempty"`
	Link   string    `json:"link,omitempty"` // LinkIB or LinkRoCE
	Dir    string    `json:"dir,omitempty"`  // cmcore.MADDirection: sent, received, retransmitted, dropped, send-failed, timed-out
	Reason string    `json:"reason,omitempty"`
	// MAD is the whole 256-byte datagram (base64 in JSON).
	MAD []byte `json:"mad,omitempty"`
	// Local is this port's end, Remote the peer's, as umad addressed the
	// MAD (the remote QPN is 1 for CM).
	Local  Endpoint `json:"local"`
	Remote Endpoint `json:"remote"`
	PKey   uint16   `json:"pkey,omitempty"`
	SL     uint8    `json:"sl,omitempty"`
	GRH    *GRH     `json:"grh,omitempty"`
	// PID and Comm are the process that owns the local end of the
	// connection (the opener of the ucm file holding the id), 0 and ""
	// when unknown; ServiceID is the connection's, where known.
	PID       int          `json:"pid,omitempty"`
	Comm      string       `json:"comm,omitempty"`
	ServiceID status.Hex64 `json:"service_id,omitempty"`

	Lost uint64 `json:"lost,omitempty"`
}

// Link layers of Event.Link.
const (
	LinkIB   = "ib"
	LinkRoCE = "roce"
)

// Endpoint is one end of a MAD: LID (0 on RoCE), GID ("" without a GRH).
type Endpoint struct {
	LID uint16 `json:"lid,omitempty"`
	GID string `json:"gid,omitempty"`
	QPN uint32 `json:"qpn"`
}

// GRH is the MAD's global route header values, as umad reported or was
// given them.
type GRH struct {
	TrafficClass uint8  `json:"tclass,omitempty"`
	FlowLabel    uint32 `json:"flow_label,omitempty"`
	HopLimit     uint8  `json:"hop_limit,omitempty"`
}

// Outbound reports whether the MAD went from Local to Remote (sent,
// retransmitted, refused, timed out) rather than the other way.
func (e *Event) Outbound() bool {
	switch e.Dir {
	case "received", "dropped":
		return false
	}
	return true
}

// Message is what an Event's MAD says, decoded.
type Message struct {
	Name string // REQ, REP, ..., SIDR_REQ; "attr 0x00NN" or "MAD" if not CM
	TID  uint64
	// LocalCommID and RemoteCommID are the comm ids of the event's local
	// and remote end (swapped from the message's fields for an inbound
	// MAD); a SIDR exchange's request id is both.
	LocalCommID, RemoteCommID uint32
	ServiceID                 uint64 // REQ, SIDR_REQ, SIDR_REP; else 0
	Msg                       wire.Message
	Err                       error // why Msg is nil
}

// Decode decodes the event's MAD.
func (e *Event) Decode() Message {
	var mad hw.MAD
	if len(e.MAD) != hw.MADSize {
		return Message{Name: "MAD", Err: fmt.Errorf("trace: MAD of %d bytes", len(e.MAD))}
	}
	copy(mad[:], e.MAD)
	h, m, err := wire.Decode(&mad)
	out := Message{Name: wire.AttrName(h.AttrID), TID: h.TID, Msg: m, Err: err}
	if h.MgmtClass != wire.MgmtClassCM {
		out.Name = fmt.Sprintf("MAD class 0x%02x", h.MgmtClass)
	}
	var from, to uint32
	switch m := m.(type) {
	case *wire.REQ:
		from, out.ServiceID = m.LocalCommID, m.ServiceID
	case *wire.MRA:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.REJ:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.REP:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.RTU:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.DREQ:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.DREP:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.LAP:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.APR:
		from, to = m.LocalCommID, m.RemoteCommID
	case *wire.SIDRREQ:
		from, to, out.ServiceID = m.RequestID, m.RequestID, m.ServiceID
	case *wire.SIDRREP:
		from, to, out.ServiceID = m.RequestID, m.RequestID, m.ServiceID
	}
	if e.Outbound() {
		out.LocalCommID, out.RemoteCommID = from, to
	} else {
		out.LocalCommID, out.RemoteCommID = to, from
	}
	return out
}

// Summary is the one-line decode of a message's own fields (what is not
// already in the line's comm id and service id columns).
func (m *Message) Summary() string {
	if m.Msg == nil {
		if m.Err != nil {
			return m.Err.Error()
		}
		return ""
	}
	var b strings.Builder
	f := func(format string, args ...any) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, format, args...)
	}
	switch m := m.Msg.(type) {
	case *wire.REQ:
		f("qpn 0x%06x psn 0x%06x %s pkey 0x%04x mtu %d", m.LocalQPN, m.StartingPSN, transport(m), m.PartitionKey, mtuBytes(m.PathMTU))
		f("resp-res %d init-depth %d retries %d/%d rnr %d", m.ResponderResources, m.InitiatorDepth, m.MaxCMRetries, m.RetryCount, m.RNRRetryCount)
		f("path %s -> %s", pathAddr(&m.Primary, true), pathAddr(&m.Primary, false))
		if m.Alternate.LocalLID != 0 {
			f("alt %s -> %s", pathAddr(&m.Alternate, true), pathAddr(&m.Alternate, false))
		}
	case *wire.MRA:
		f("for %s timeout %d", msgKind(m.MessageMRAed), m.ServiceTimeout)
	case *wire.REJ:
		f("reason %d (%s) for %s", m.Reason, rejName(m.Reason), msgKind(m.MessageRejected))
		if len(m.ARI) > 0 {
			f("ari %x", m.ARI)
		}
	case *wire.REP:
		f("qpn 0x%06x psn 0x%06x resp-res %d init-depth %d ack-delay %d rnr %d", m.LocalQPN, m.StartingPSN, m.ResponderResources, m.InitiatorDepth, m.TargetACKDelay, m.RNRRetryCount)
	case *wire.DREQ:
		f("remote qpn 0x%06x", m.RemoteQPN)
	case *wire.LAP:
		f("remote qpn 0x%06x alt %s -> %s", m.RemoteQPN, pathAddr(&m.Alternate, true), pathAddr(&m.Alternate, false))
	case *wire.APR:
		f("status %d", m.APStatus)
	case *wire.SIDRREQ:
		f("pkey 0x%04x", m.PartitionKey)
	case *wire.SIDRREP:
		f("status %d qpn 0x%06x qkey 0x%08x", m.Status, m.QPN, m.QKey)
	}
	return b.String()
}

func transport(m *wire.REQ) string {
	switch m.TransportType {
	case wire.TransportRC:
		return "RC"
	case wire.TransportUC:
		return "UC"
	case wire.TransportRD:
		return "RD"
	}
	if m.ExtendedTransport == wire.ExtendedTransportXRC {
		return "XRC"
	}
	return fmt.Sprintf("transport %d/%d", m.TransportType, m.ExtendedTransport)
}

func mtuBytes(enum uint8) int {
	if enum >= 1 && enum <= 5 {
		return 128 << enum
	}
	return int(enum)
}

func pathAddr(p *wire.Path, local bool) string {
	lid, gid := p.RemoteLID, p.RemoteGID
	if local {
		lid, gid = p.LocalLID, p.LocalGID
	}
	if gid.IsZero() {
		return fmt.Sprintf("lid %d", lid)
	}
	a := netip.AddrFrom16(gid)
	if a.Is4In6() {
		a = a.Unmap()
	}
	if lid == 0 || lid == 0xffff {
		return a.String()
	}
	return fmt.Sprintf("lid %d %s", lid, a)
}

func msgKind(k uint8) string {
	switch k {
	case 0:
		return "REQ"
	case 1:
		return "REP"
	case 2:
		return "other"
	}
	return fmt.Sprintf("%d", k)
}

// rejName names the common reject reasons (IBTA table 109).
func rejName(r uint16) string {
	switch r {
	case 1:
		return "no QP"
	case 2:
		return "no EEC"
	case 3:
		return "no resources"
	case 4:
		return "timeout"
	case 5:
		return "unsupported"
	case 6:
		return "invalid comm id"
	case 7:
		return "invalid comm instance"
	case 8:
		return "invalid service id"
	case 9:
		return "invalid transport type"
	case 10:
		return "stale connection"
	case 11:
		return "RDC not exist"
	case 12:
		return "invalid GID"
	case 13:
		return "invalid LID"
	case 14:
		return "invalid SL"
	case 15:
		return "invalid traffic class"
	case 16:
		return "invalid hop limit"
	case 17:
		return "invalid packet rate"
	case 18:
		return "invalid alt GID"
	case 19:
		return "invalid alt LID"
	case 20:
		return "invalid alt SL"
	case 21:
		return "invalid alt traffic class"
	case 22:
		return "invalid alt hop limit"
	case 23:
		return "invalid alt packet rate"
	case 24:
		return "port redirect"
	case 26:
		return "invalid MTU"
	case 27:
		return "insufficient response resources"
	case 28:
		return "consumer defined"
	case 29:
		return "invalid RNR retry"
	case 30:
		return "duplicate local comm id"
	case 31:
		return "invalid class version"
	case 32:
		return "invalid flow label"
	case 33:
		return "invalid alt flow label"
	}
	return "?"
}
