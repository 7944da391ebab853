package abi

// PathRecSize is sizeof(struct ib_user_path_rec).
const PathRecSize = 64

// PathRec is struct ib_user_path_rec (<rdma/ib_user_sa.h>), the path record
// SEND_REQ, SEND_LAP and SEND_SIDR_REQ point to and REQ/LAP events carry
// inline. libibverbs copies it field by field from struct ibv_sa_path_rec
// without swapping, so the big-endian fields really are big-endian here.
type PathRec struct {
	DGID                   [16]byte // @0
	SGID                   [16]byte // @16
	DLID                   uint16   // @32 __be16
	SLID                   uint16   // @34 __be16
	RawTraffic             uint32   // @36
	FlowLabel              uint32   // @40 __be32
	Reversible             uint32   // @44
	MTU                    uint32   // @48 enum ib_mtu, 1 (256) .. 5 (4096)
	PKey                   uint16   // @52 __be16
	HopLimit               uint8    // @54
	TrafficClass           uint8    // @55
	NumbPath               uint8    // @56
	SL                     uint8    // @57
	MTUSelector            uint8    // @58
	RateSelector           uint8    // @59
	Rate                   uint8    // @60
	PacketLifeTimeSelector uint8    // @61
	PacketLifeTime         uint8    // @62
	Preference             uint8    // @63
}

func (*PathRec) Size() int { return PathRecSize }

func (p *PathRec) Encode(b []byte) {
	b = fit(b, PathRecSize)
	copy(b[0:16], p.DGID[:])
	copy(b[16:32], p.SGID[:])
	be.PutUint16(b[32:], p.DLID)
	be.PutUint16(b[34:], p.SLID)
	ne.PutUint32(b[36:], p.RawTraffic)
	be.PutUint32(b[40:], p.FlowLabel)
	ne.PutUint32(b[44:], p.Reversible)
	ne.PutUint32(b[48:], p.MTU)
	be.PutUint16(b[52:], p.PKey)
	b[54] = p.HopLimit
	b[55] = p.TrafficClass
	b[56] = p.NumbPath
	b[57] = p.SL
	b[58] = p.MTUSelector
	b[59] = p.RateSelector
	b[60] = p.Rate
	b[61] = p.PacketLifeTimeSelector
	b[62] = p.PacketLifeTime
	b[63] = p.Preference
}

func (p *PathRec) Decode(b []byte) {
	var w [PathRecSize]byte
	copy(w[:], b)
	copy(p.DGID[:], w[0:16])
	copy(p.SGID[:], w[16:32])
	p.DLID = be.Uint16(w[32:])
	p.SLID = be.Uint16(w[34:])
	p.RawTraffic = ne.Uint32(w[36:])
	p.FlowLabel = be.Uint32(w[40:])
	p.Reversible = ne.Uint32(w[44:])
	p.MTU = ne.Uint32(w[48:])
	p.PKey = be.Uint16(w[52:])
	p.HopLimit = w[54]
	p.TrafficClass = w[55]
	p.NumbPath = w[56]
	p.SL = w[57]
	p.MTUSelector = w[58]
	p.RateSelector = w[59]
	p.Rate = w[60]
	p.PacketLifeTimeSelector = w[61]
	p.PacketLifeTime = w[62]
	p.Preference = w[63]
}
