package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ucmd/ucmd/hw"
)

// HeaderSize is the size of the common MAD header; the CM message (the MAD
// data area) follows it.
const HeaderSize = 24

// DataSize is the size of the MAD data area every CM message fills.
const DataSize = hw.MADSize - HeaderSize

// Header is the common MAD header.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        uint16
	AttrMod       uint32
}

// Errors Decode wraps, for callers that count or log drops by kind.
var (
	// ErrNotCM: not a CM class version 2 SEND MAD.
	ErrNotCM = errors.New("not a CM SEND MAD")
	// ErrUnknownAttribute: a CM MAD whose attribute is not one of the
	// eleven messages (Linux drops these silently).
	ErrUnknownAttribute = errors.New("unknown CM attribute")
)

// MAD header offsets.
const (
	hdrBaseVersion   = 0
	hdrMgmtClass     = 1
	hdrClassVersion  = 2
	hdrMethod        = 3
	hdrStatus        = 4
	hdrClassSpecific = 6
	hdrTID           = 8
	hdrAttrID        = 16
	hdrReserved      = 18
	hdrAttrMod       = 20
)

// DecodeHeader returns the MAD header of mad and checks that it is a CM
// class version 2 SEND. The header is returned even when the check fails.
func DecodeHeader(mad *hw.MAD) (Header, error) {
	h := Header{
		BaseVersion:   mad[hdrBaseVersion],
		MgmtClass:     mad[hdrMgmtClass],
		ClassVersion:  mad[hdrClassVersion],
		Method:        mad[hdrMethod],
		Status:        binary.BigEndian.Uint16(mad[hdrStatus:]),
		ClassSpecific: binary.BigEndian.Uint16(mad[hdrClassSpecific:]),
		TID:           binary.BigEndian.Uint64(mad[hdrTID:]),
		AttrID:        binary.BigEndian.Uint16(mad[hdrAttrID:]),
		AttrMod:       binary.BigEndian.Uint32(mad[hdrAttrMod:]),
	}
	switch {
	case h.BaseVersion != BaseVersion:
		return h, fmt.Errorf("decode MAD header: base version %d, want %d: %w", h.BaseVersion, BaseVersion, ErrNotCM)
	case h.MgmtClass != MgmtClassCM:
		return h, fmt.Errorf("decode MAD header: management class 0x%02x, want 0x%02x: %w", h.MgmtClass, MgmtClassCM, ErrNotCM)
	case h.ClassVersion != ClassVersion:
		return h, fmt.Errorf("decode MAD header: class version %d, want %d: %w", h.ClassVersion, ClassVersion, ErrNotCM)
	case h.Method != MethodSend:
		return h, fmt.Errorf("decode MAD header: method 0x%02x, want SEND: %w", h.Method, ErrNotCM)
	}
	return h, nil
}

// putHeader writes a CM SEND header. Status, ClassSpecific and AttrMod are
// zero: ECE (attribute modifier in REQ/REP/SIDR_REP) is not supported.
func putHeader(mad *hw.MAD, tid uint64, attr uint16) {
	mad[hdrBaseVersion] = BaseVersion
	mad[hdrMgmtClass] = MgmtClassCM
	mad[hdrClassVersion] = ClassVersion
	mad[hdrMethod] = MethodSend
	binary.BigEndian.PutUint16(mad[hdrStatus:], 0)
	binary.BigEndian.PutUint16(mad[hdrClassSpecific:], 0)
	binary.BigEndian.PutUint64(mad[hdrTID:], tid)
	binary.BigEndian.PutUint16(mad[hdrAttrID:], attr)
	binary.BigEndian.PutUint16(mad[hdrReserved:], 0)
	binary.BigEndian.PutUint32(mad[hdrAttrMod:], 0)
}
