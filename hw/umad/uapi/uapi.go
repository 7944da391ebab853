// Package uapi is the umad kernel ABI from include/uapi/rdma/ib_user_mad.h
// and rdma_user_ioctl.h: the ioctl numbers and explicit encoders for the
// structs that cross the /dev/infiniband/umadN boundary.
//
// Host-order fields (id, status, timeout_ms, retries, length, pkey_index,
// method_mask) are encoded in native byte order; __be fields big-endian.
package uapi

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// IB_USER_MAD_ABI_VERSION is the ABI /sys/class/infiniband_mad/abi_version
// reports; the layout below is version 5.
const IB_USER_MAD_ABI_VERSION = 5

// RDMA_IOCTL_MAGIC is the ioctl type of all RDMA character devices.
const RDMA_IOCTL_MAGIC = 0x1b

// Struct sizes.
const (
	// SizeofUserMADHdr is struct ib_user_mad_hdr, the header of every
	// read() and write() once IB_USER_MAD_ENABLE_PKEY is set.
	SizeofUserMADHdr = 64
	// SizeofUserMADHdrOld is struct ib_user_mad_hdr_old (no pkey_index),
	// what the file speaks until P_Key mode is enabled.
	SizeofUserMADHdrOld = 56
	// SizeofRegReq is struct ib_user_mad_reg_req: method_mask is
	// unsigned long aligned(4), so 4+16+7 rounds up to 28 on every arch.
	SizeofRegReq = 28
	// SizeofRegReq2 is struct ib_user_mad_reg_req2.
	SizeofRegReq2 = 40
)

// IB_UMAD_MAX_AGENTS is the number of agents one open file can register.
const IB_UMAD_MAX_AGENTS = 32

// The umad ioctls: _IOWR(RDMA_IOCTL_MAGIC, 1, struct ib_user_mad_reg_req),
// _IOW(…, 2, __u32), _IO(…, 3) and _IOWR(…, 4, struct ib_user_mad_reg_req2).
const (
	IB_USER_MAD_REGISTER_AGENT   = (iocRead|iocWrite)<<iocDirShift | SizeofRegReq<<iocSizeShift | RDMA_IOCTL_MAGIC<<8 | 0x01
	IB_USER_MAD_UNREGISTER_AGENT = iocWrite<<iocDirShift | 4<<iocSizeShift | RDMA_IOCTL_MAGIC<<8 | 0x02
	IB_USER_MAD_ENABLE_PKEY      = iocNone<<iocDirShift | RDMA_IOCTL_MAGIC<<8 | 0x03
	IB_USER_MAD_REGISTER_AGENT2  = (iocRead|iocWrite)<<iocDirShift | SizeofRegReq2<<iocSizeShift | RDMA_IOCTL_MAGIC<<8 | 0x04
)

const iocSizeShift = 16

// UserMADHdr is struct ib_user_mad_hdr.
type UserMADHdr struct {
	ID           uint32 // agent id from REGISTER_AGENT
	Status       uint32 // receive: 0, or an errno for a failed send (ETIMEDOUT)
	TimeoutMS    uint32 // send: wait this long for a response; 0 = none
	Retries      uint32
	Length       uint32 // receive: header + MAD bytes
	QPN          uint32 // __be32
	QKey         uint32 // __be32
	LID          uint16 // __be16
	SL           uint8
	PathBits     uint8
	GRHPresent   uint8
	GIDIndex     uint8
	HopLimit     uint8
	TrafficClass uint8
	GID          [16]byte
	FlowLabel    uint32 // __be32
	PKeyIndex    uint16
	// reserved[6]
}

// ErrShort reports a buffer smaller than the struct it should hold.
var ErrShort = errors.New("umad: buffer too short")

// Encode writes h into b[:SizeofUserMADHdr], zeroing the reserved bytes;
// ErrShort if b is shorter.
func (h *UserMADHdr) Encode(b []byte) error {
	if len(b) < SizeofUserMADHdr {
		return ErrShort
	}
	ne, be := binary.NativeEndian, binary.BigEndian
	ne.PutUint32(b[0:], h.ID)
	ne.PutUint32(b[4:], h.Status)
	ne.PutUint32(b[8:], h.TimeoutMS)
	ne.PutUint32(b[12:], h.Retries)
	ne.PutUint32(b[16:], h.Length)
	be.PutUint32(b[20:], h.QPN)
	be.PutUint32(b[24:], h.QKey)
	be.PutUint16(b[28:], h.LID)
	b[30] = h.SL
	b[31] = h.PathBits
	b[32] = h.GRHPresent
	b[33] = h.GIDIndex
	b[34] = h.HopLimit
	b[35] = h.TrafficClass
	copy(b[36:52], h.GID[:])
	be.PutUint32(b[52:], h.FlowLabel)
	ne.PutUint16(b[56:], h.PKeyIndex)
	clear(b[58:64])
	return nil
}

// Decode reads h from b[:SizeofUserMADHdr]; ErrShort if b is shorter.
func (h *UserMADHdr) Decode(b []byte) error {
	if len(b) < SizeofUserMADHdr {
		return ErrShort
	}
	ne, be := binary.NativeEndian, binary.BigEndian
	h.ID = ne.Uint32(b[0:])
	h.Status = ne.Uint32(b[4:])
	h.TimeoutMS = ne.Uint32(b[8:])
	h.Retries = ne.Uint32(b[12:])
	h.Length = ne.Uint32(b[16:])
	h.QPN = be.Uint32(b[20:])
	h.QKey = be.Uint32(b[24:])
	h.LID = be.Uint16(b[28:])
	h.SL = b[30]
	h.PathBits = b[31]
	h.GRHPresent = b[32]
	h.GIDIndex = b[33]
	h.HopLimit = b[34]
	h.TrafficClass = b[35]
	copy(h.GID[:], b[36:52])
	h.FlowLabel = be.Uint32(b[52:])
	h.PKeyIndex = ne.Uint16(b[56:])
	return nil
}

// IB_MGMT_MAX_METHODS is the width of a registration's method mask.
const IB_MGMT_MAX_METHODS = 128

// RegReq is struct ib_user_mad_reg_req.
type RegReq struct {
	ID               uint32 // out: the agent id
	MethodMask       [IB_MGMT_MAX_METHODS / 64]uint64
	QPN              uint8 // 0 = SMI (QP0), 1 = GSI (QP1)
	MgmtClass        uint8 // 0 = send-only agent (no registration)
	MgmtClassVersion uint8
	OUI              [3]byte
	RMPPVersion      uint8 // 0: no kernel RMPP
}

// SetMethod adds method m to the mask. It reports false for m >= 128,
// which no mask can hold (the response bit is never registered).
func (r *RegReq) SetMethod(m uint8) bool {
	if m >= IB_MGMT_MAX_METHODS {
		return false
	}
	r.MethodMask[m/64] |= 1 << (m % 64)
	return true
}

// Encode writes r into b[:SizeofRegReq] (ErrShort if shorter). method_mask is an array of
// unsigned long used as a kernel bitmap (bit m is bit m%W of long m/W),
// so its bytes depend on the word size and byte order.
func (r *RegReq) Encode(b []byte) error {
	if len(b) < SizeofRegReq {
		return ErrShort
	}
	clear(b[:SizeofRegReq])
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], r.ID)
	mask := b[4:20]
	for m := 0; m < IB_MGMT_MAX_METHODS; m++ {
		if r.MethodMask[m/64]&(1<<(m%64)) == 0 {
			continue
		}
		word, bit := m/bits.UintSize, uint(m%bits.UintSize)
		if bits.UintSize == 64 {
			o := mask[word*8:]
			ne.PutUint64(o, ne.Uint64(o)|1<<bit)
		} else {
			o := mask[word*4:]
			ne.PutUint32(o, ne.Uint32(o)|1<<bit)
		}
	}
	b[20] = r.QPN
	b[21] = r.MgmtClass
	b[22] = r.MgmtClassVersion
	copy(b[23:26], r.OUI[:])
	b[26] = r.RMPPVersion
	return nil
}

// DecodeRegReqID reads back the agent id the kernel stored in an
// encoded ib_user_mad_reg_req.
func DecodeRegReqID(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, ErrShort
	}
	return binary.NativeEndian.Uint32(b), nil
}
