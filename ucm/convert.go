package ucm

import (
	"github.com/ucmd/ucmd/abi"
	"github.com/ucmd/ucmd/cmcore"
	"github.com/ucmd/ucmd/hw"
)

// pathFromABI is ib_copy_path_rec_from_user.
func pathFromABI(p *abi.PathRec) *cmcore.PathRecord {
	return &cmcore.PathRecord{
		DGID:                   hw.GID(p.DGID),
		SGID:                   hw.GID(p.SGID),
		DLID:                   p.DLID,
		SLID:                   p.SLID,
		RawTraffic:             p.RawTraffic != 0,
		FlowLabel:              p.FlowLabel,
		Reversible:             p.Reversible != 0,
		MTU:                    uint8(p.MTU),
		PKey:                   p.PKey,
		HopLimit:               p.HopLimit,
		TrafficClass:           p.TrafficClass,
		NumbPath:               p.NumbPath,
		SL:                     p.SL,
		MTUSelector:            p.MTUSelector,
		RateSelector:           p.RateSelector,
		Rate:                   p.Rate,
		PacketLifeTimeSelector: p.PacketLifeTimeSelector,
		PacketLifeTime:         p.PacketLifeTime,
		Preference:             p.Preference,
	}
}

// pathToABI is ib_copy_path_rec_to_user.
func pathToABI(p *cmcore.PathRecord) abi.PathRec {
	return abi.PathRec{
		DGID:                   p.DGID,
		SGID:                   p.SGID,
		DLID:                   p.DLID,
		SLID:                   p.SLID,
		RawTraffic:             uint32(b2u(p.RawTraffic)),
		FlowLabel:              p.FlowLabel,
		Reversible:             uint32(b2u(p.Reversible)),
		MTU:                    uint32(p.MTU),
		PKey:                   p.PKey,
		HopLimit:               p.HopLimit,
		TrafficClass:           p.TrafficClass,
		NumbPath:               p.NumbPath,
		SL:                     p.SL,
		MTUSelector:            p.MTUSelector,
		RateSelector:           p.RateSelector,
		Rate:                   p.Rate,
		PacketLifeTimeSelector: p.PacketLifeTimeSelector,
		PacketLifeTime:         p.PacketLifeTime,
		Preference:             p.Preference,
	}
}

// qpAttrToABI is ib_copy_qp_attr_to_user for what ib_cm_init_qp_attr
// fills; everything else stays zero.
func qpAttrToABI(a *cmcore.QPAttr, mask uint32, state abi.QPState) abi.QPAttr {
	return abi.QPAttr{
		QPAttrMask:      abi.QPAttrMask(mask),
		QPState:         state,
		PathMTU:         uint32(a.PathMTU),
		PathMigState:    abi.MigState(a.PathMigState),
		RQPSN:           a.RQPSN,
		SQPSN:           a.SQPSN,
		DestQPNum:       a.DestQPN,
		QPAccessFlags:   abi.AccessFlags(a.AccessFlags),
		AHAttr:          ahToABI(&a.AH),
		AltAHAttr:       ahToABI(&a.AltAH),
		PKeyIndex:       a.PKeyIndex,
		AltPKeyIndex:    a.AltPKeyIndex,
		MaxRdAtomic:     a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic,
		MinRNRTimer:     a.MinRNRTimer,
		PortNum:         a.PortNum,
		Timeout:         a.Timeout,
		RetryCnt:        a.RetryCnt,
		RNRRetry:        a.RNRRetry,
		AltPortNum:      a.AltPortNum,
		AltTimeout:      a.AltTimeout,
	}
}

// ahToABI is ib_copy_ah_attr_to_user; the GRH only when global.
func ahToABI(av *cmcore.AddressVector) abi.AHAttr {
	ah := abi.AHAttr{
		DLID:        av.DLID,
		SL:          av.SL,
		SrcPathBits: av.SrcPathBits,
		StaticRate:  av.StaticRate,
		IsGlobal:    b2u(av.IsGlobal),
		PortNum:     av.PortNum,
	}
	if av.IsGlobal {
		ah.GRH = abi.GlobalRoute{
			DGID:         av.GRH.DGID,
			FlowLabel:    av.GRH.FlowLabel,
			SGIDIndex:    av.GRH.SGIDIndex,
			HopLimit:     av.GRH.HopLimit,
			TrafficClass: av.GRH.TrafficClass,
		}
	}
	return ah
}
