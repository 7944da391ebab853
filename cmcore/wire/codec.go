package wire

import (
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/hw"
)

// Errors Encode wraps; both mean the caller passed a bad value (EINVAL).
var (
	// ErrFieldOverflow: a value does not fit its wire field.
	ErrFieldOverflow = errors.New("value does not fit its field")
	// ErrTooLong: private data, ARI or info longer than its area.
	ErrTooLong = errors.New("longer than its area")
)

// Encode writes m as a complete CM MAD with transaction ID tid into mad,
// overwriting all 256 bytes: header, message, zero-padded private data and
// zero reserved bits. It fails, leaving mad unspecified, if a field does not
// fit its wire width (ErrFieldOverflow) or private data, ARI or info is
// longer than its area (ErrTooLong).
func Encode(mad *hw.MAD, tid uint64, m Message) error {
	clear(mad[:])
	e := encoder{d: mad[HeaderSize:]}
	// A type switch rather than an interface method keeps e on the stack.
	switch m := m.(type) {
	case *REQ:
		m.encode(&e)
	case *MRA:
		m.encode(&e)
	case *REJ:
		m.encode(&e)
	case *REP:
		m.encode(&e)
	case *RTU:
		m.encode(&e)
	case *DREQ:
		m.encode(&e)
	case *DREP:
		m.encode(&e)
	case *LAP:
		m.encode(&e)
	case *APR:
		m.encode(&e)
	case *SIDRREQ:
		m.encode(&e)
	case *SIDRREP:
		m.encode(&e)
	default:
		return fmt.Errorf("encode CM MAD: unsupported message type %T", m)
	}
	if e.err != nil {
		return e.err
	}
	putHeader(mad, tid, m.AttrID())
	return nil
}

// Decode parses a received CM MAD. It fails for MADs that are not CM class
// version 2 SENDs (ErrNotCM), for attributes other than the eleven messages
// (ErrUnknownAttribute, ClassPortInfo included). The header is returned
// whenever it could be read. Reserved bits are ignored.
//
// The message does not alias mad. Its PrivateData is the whole area of its
// type; ARI and Info are as long as their length fields say, at most their
// area (variable).
func Decode(mad *hw.MAD) (Header, Message, error) {
	h, err := DecodeHeader(mad)
	if err != nil {
		return h, nil, err
	}
	d := mad[HeaderSize:]
	var m Message
	switch h.AttrID {
	case AttrREQ:
		m, err = decodeREQ(d)
	case AttrMRA:
		m, err = decodeMRA(d)
	case AttrREJ:
		m, err = decodeREJ(d)
	case AttrREP:
		m, err = decodeREP(d)
	case AttrRTU:
		m, err = decodeRTU(d)
	case AttrDREQ:
		m, err = decodeDREQ(d)
	case AttrDREP:
		m, err = decodeDREP(d)
	case AttrLAP:
		m, err = decodeLAP(d)
	case AttrAPR:
		m, err = decodeAPR(d)
	case AttrSIDRREQ:
		m, err = decodeSIDRREQ(d)
	case AttrSIDRREP:
		m, err = decodeSIDRREP(d)
	default:
		return h, nil, fmt.Errorf("decode CM MAD: attribute %#04x: %w", h.AttrID, ErrUnknownAttribute)
	}
	if err != nil {
		return h, nil, err
	}
	return h, m, nil
}

// encoder writes fields into a zeroed data area and keeps the first error.
type encoder struct {
	d   []byte
	msg string
	err error
}

func (e *encoder) start(msg string, isNil bool) bool {
	e.msg = msg
	if isNil {
		e.err = fmt.Errorf("encode %s: nil message", msg)
	}
	return !isNil
}

func (e *encoder) put(f *bitField, v uint64) {
	if e.err != nil {
		return
	}
	if v > f.max() {
		e.err = fmt.Errorf("encode %s: %s %#x does not fit in %d bits: %w", e.msg, f.name, v, f.width, ErrFieldOverflow)
		return
	}
	f.put(e.d, v)
}

func (e *encoder) flag(f *bitField, v bool) {
	if v {
		e.put(f, 1)
	}
}

func (e *encoder) bytes(a area, b []byte) {
	if e.err != nil {
		return
	}
	if len(b) > a.size {
		e.err = fmt.Errorf("encode %s: %s is %d bytes, at most %d: %w", e.msg, a.name, len(b), a.size, ErrTooLong)
		return
	}
	copy(e.d[a.off:], b)
}

func (e *encoder) gid(a area, g hw.GID) { copy(e.d[a.off:a.off+a.size], g[:]) }

func (e *encoder) path(l *pathLayout, p *Path) {
	e.put(&l.localLID, uint64(p.LocalLID))
	e.put(&l.remoteLID, uint64(p.RemoteLID))
	e.gid(l.localGID, p.LocalGID)
	e.gid(l.remoteGID, p.RemoteGID)
	e.put(&l.flowLabel, uint64(p.FlowLabel))
	e.put(&l.packetRate, uint64(p.PacketRate))
	e.put(&l.trafficClass, uint64(p.TrafficClass))
	e.put(&l.hopLimit, uint64(p.HopLimit))
	e.put(&l.sl, uint64(p.SL))
	e.flag(&l.subnetLocal, p.SubnetLocal)
	e.put(&l.localACKTimeout, uint64(p.LocalACKTimeout))
}

func decodePath(d []byte, l *pathLayout) Path {
	return Path{
		LocalLID:        uint16(l.localLID.get(d)),
		RemoteLID:       uint16(l.remoteLID.get(d)),
		LocalGID:        hw.GID(l.localGID.get(d)),
		RemoteGID:       hw.GID(l.remoteGID.get(d)),
		FlowLabel:       uint32(l.flowLabel.get(d)),
		PacketRate:      uint8(l.packetRate.get(d)),
		TrafficClass:    uint8(l.trafficClass.get(d)),
		HopLimit:        uint8(l.hopLimit.get(d)),
		SL:              uint8(l.sl.get(d)),
		SubnetLocal:     l.subnetLocal.get(d) != 0,
		LocalACKTimeout: uint8(l.localACKTimeout.get(d)),
	}
}

// variable returns area a and how much of it the length field uses, at
// most the whole area. A length past the area (7 bits of REJ's ARI length
// can say 127 of 72, 8 bits of APR's and SIDR_REP's info length 255) is
// cut to it, and the message handled: the kernel's CM handled it too, but
// handed ib_ucm that many bytes from the ARI on, the following private
// data and, for 8-bit lengths, memory past the MAD; a client's GET_EVENT
// buffer, sized for the area, then failed with ENOMEM on the event for
// good. Dropping the MAD instead would turn the peer's REJ into a timeout.
func variable(d []byte, a area, lenField *bitField) ([]byte, int) {
	return a.get(d), min(int(lenField.get(d)), a.size)
}
