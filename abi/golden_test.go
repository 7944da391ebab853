package abi

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

// goldenCase is one wire struct: a value whose fields are all distinct and
// the exact bytes it has in C. The values follow one pattern so that any
// wrong offset, width or byte order shows: the byte at offset o of the struct
// is o+1, reserved bytes are zero. Host-order fields are written for a
// little-endian host (x86_64, arm64); on a big-endian one (s390x, make
// cross) these tests skip and the others check the byte order.
type goldenCase struct {
	name     string // the kernel's struct name
	size     int    // sizeof, as compiled by gcc for x86_64 and i386
	val      Struct
	golden   string   // hex bytes
	reserved [][2]int // [from, to) byte ranges the kernel ignores
}

var goldenCases = []goldenCase{
	{
		name: "ib_ucm_cmd_hdr", size: 8,
		val: &Header{Cmd: Cmd(0x04030201), In: 0x0605, Out: 0x0807},
		golden: `
			01 02 03 04 05 06 07 08
		`,
	},
	{
		name: "ib_ucm_create_id", size: 16,
		val: &CreateID{UID: 0x0807060504030201, Response: 0x100f0e0d0c0b0a09},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
		`,
	},
	{
		name: "ib_ucm_destroy_id", size: 16,
		val: &DestroyID{Response: 0x0807060504030201, ID: 0x0c0b0a09},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 00 00 00 00
		`,
		reserved: [][2]int{{12, 16}},
	},
	{
		name: "ib_ucm_attr_id", size: 16,
		val: &AttrID{Response: 0x0807060504030201, ID: 0x0c0b0a09},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 00 00 00 00
		`,
		reserved: [][2]int{{12, 16}},
	},
	{
		name: "ib_ucm_init_qp_attr", size: 16,
		val: &InitQPAttr{Response: 0x0807060504030201, ID: 0x0c0b0a09, QPState: QPState(0x100f0e0d)},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
		`,
	},
	{
		name: "ib_ucm_listen", size: 24,
		val: &Listen{ServiceID: 0x0102030405060708, ServiceMask: 0x090a0b0c0d0e0f10, ID: 0x14131211},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 00 00 00 00
		`,
		reserved: [][2]int{{20, 24}},
	},
	{
		name: "ib_ucm_notify", size: 8,
		val: &Notify{ID: 0x04030201, Event: IBEvent(0x08070605)},
		golden: `
			01 02 03 04 05 06 07 08
		`,
	},
	{
		name: "ib_ucm_private_data", size: 16,
		val: &PrivateData{Data: 0x0807060504030201, ID: 0x0c0b0a09, Len: 0x0d},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 00 00 00
		`,
		reserved: [][2]int{{13, 16}},
	},
	{
		name: "ib_ucm_req", size: 64,
		val: &REQ{
			ID:                      0x04030201,
			QPN:                     0x08070605,
			QPType:                  QPType(0x0c0b0a09),
			PSN:                     0x100f0e0d,
			SID:                     0x1112131415161718,
			Data:                    0x201f1e1d1c1b1a19,
			PrimaryPath:             0x2827262524232221,
			AlternatePath:           0x302f2e2d2c2b2a29,
			Len:                     0x31,
			PeerToPeer:              0x32,
			ResponderResources:      0x33,
			InitiatorDepth:          0x34,
			RemoteCMResponseTimeout: 0x35,
			FlowControl:             0x36,
			LocalCMResponseTimeout:  0x37,
			RetryCount:              0x38,
			RNRRetryCount:           0x39,
			MaxCMRetries:            0x3a,
			SRQ:                     0x3b,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30
			31 32 33 34 35 36 37 38 39 3a 3b 00 00 00 00 00
		`,
		reserved: [][2]int{{59, 64}},
	},
	{
		name: "ib_ucm_rep", size: 40,
		val: &REP{
			UID:                0x0807060504030201,
			Data:               0x100f0e0d0c0b0a09,
			ID:                 0x14131211,
			QPN:                0x18171615,
			PSN:                0x1c1b1a19,
			Len:                0x1d,
			ResponderResources: 0x1e,
			InitiatorDepth:     0x1f,
			TargetAckDelay:     0x20,
			FailoverAccepted:   0x21,
			FlowControl:        0x22,
			RNRRetryCount:      0x23,
			SRQ:                0x24,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 00 00 00 00
		`,
		reserved: [][2]int{{36, 40}},
	},
	{
		name: "ib_ucm_info", size: 32,
		val: &Info{
			ID:      0x04030201,
			Status:  0x08070605,
			Info:    0x100f0e0d0c0b0a09,
			Data:    0x1817161514131211,
			InfoLen: 0x19,
			DataLen: 0x1a,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 00 00 00 00 00 00
		`,
		reserved: [][2]int{{26, 32}},
	},
	{
		name: "ib_ucm_mra", size: 16,
		val: &MRA{
			Data:    0x0807060504030201,
			ID:      0x0c0b0a09,
			Len:     0x0d,
			Timeout: 0x0e,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 00 00
		`,
		reserved: [][2]int{{14, 16}},
	},
	{
		name: "ib_ucm_lap", size: 24,
		val: &LAP{
			Path: 0x0807060504030201,
			Data: 0x100f0e0d0c0b0a09,
			ID:   0x14131211,
			Len:  0x15,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 00 00 00
		`,
		reserved: [][2]int{{21, 24}},
	},
	{
		name: "ib_ucm_sidr_req", size: 40,
		val: &SIDRREQ{
			ID:           0x04030201,
			Timeout:      0x08070605,
			SID:          0x090a0b0c0d0e0f10,
			Data:         0x1817161514131211,
			Path:         0x201f1e1d1c1b1a19,
			ReservedPKey: 0x2221,
			Len:          0x23,
			MaxCMRetries: 0x24,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 00 00 00 00
		`,
		reserved: [][2]int{{36, 40}},
	},
	{
		name: "ib_ucm_sidr_rep", size: 40,
		val: &SIDRREP{
			ID:      0x04030201,
			QPN:     0x08070605,
			QKey:    0x0c0b0a09,
			Status:  0x100f0e0d,
			Info:    0x1817161514131211,
			Data:    0x201f1e1d1c1b1a19,
			InfoLen: 0x21,
			DataLen: 0x22,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 00 00 00 00 00 00
		`,
		reserved: [][2]int{{34, 40}},
	},
	{
		name: "ib_ucm_event_get", size: 32,
		val: &EventGet{
			Response: 0x0807060504030201,
			Data:     0x100f0e0d0c0b0a09,
			Info:     0x1817161514131211,
			DataLen:  0x19,
			InfoLen:  0x1a,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 00 00 00 00 00 00
		`,
		reserved: [][2]int{{26, 32}},
	},
	{
		name: "ib_ucm_create_id_resp", size: 4,
		val: &CreateIDResp{ID: 0x04030201},
		golden: `
			01 02 03 04
		`,
	},
	{
		name: "ib_ucm_destroy_id_resp", size: 4,
		val: &DestroyIDResp{EventsReported: 0x04030201},
		golden: `
			01 02 03 04
		`,
	},
	{
		name: "ib_ucm_attr_id_resp", size: 24,
		val: &AttrIDResp{
			ServiceID:   0x0102030405060708,
			ServiceMask: 0x090a0b0c0d0e0f10,
			LocalID:     0x11121314,
			RemoteID:    0x15161718,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18
		`,
	},
	{
		name: "ib_user_path_rec", size: 64,
		val: &PathRec{
			DGID:                   [16]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10},
			SGID:                   [16]byte{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20},
			DLID:                   0x2122,
			SLID:                   0x2324,
			RawTraffic:             0x28272625,
			FlowLabel:              0x292a2b2c,
			Reversible:             0x302f2e2d,
			MTU:                    0x34333231,
			PKey:                   0x3536,
			HopLimit:               0x37,
			TrafficClass:           0x38,
			NumbPath:               0x39,
			SL:                     0x3a,
			MTUSelector:            0x3b,
			RateSelector:           0x3c,
			Rate:                   0x3d,
			PacketLifeTimeSelector: 0x3e,
			PacketLifeTime:         0x3f,
			Preference:             0x40,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30
			31 32 33 34 35 36 37 38 39 3a 3b 3c 3d 3e 3f 40
		`,
	},
	{
		name: "ib_uverbs_global_route", size: 24,
		val: &GlobalRoute{
			DGID:         [16]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10},
			FlowLabel:    0x14131211,
			SGIDIndex:    0x15,
			HopLimit:     0x16,
			TrafficClass: 0x17,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 00
		`,
		reserved: [][2]int{{23, 24}},
	},
	{
		name: "ib_uverbs_ah_attr", size: 32,
		val: &AHAttr{
			GRH: GlobalRoute{
				DGID:         [16]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10},
				FlowLabel:    0x14131211,
				SGIDIndex:    0x15,
				HopLimit:     0x16,
				TrafficClass: 0x17,
			},
			DLID:        0x1a19,
			SL:          0x1b,
			SrcPathBits: 0x1c,
			StaticRate:  0x1d,
			IsGlobal:    0x1e,
			PortNum:     0x1f,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 00 19 1a 1b 1c 1d 1e 1f 00
		`,
		reserved: [][2]int{{23, 24}, {31, 32}},
	},
	{
		name: "ib_uverbs_qp_attr", size: 144,
		val: &QPAttr{
			QPAttrMask:    QPAttrMask(0x04030201),
			QPState:       QPState(0x08070605),
			CurQPState:    QPState(0x0c0b0a09),
			PathMTU:       0x100f0e0d,
			PathMigState:  MigState(0x14131211),
			QKey:          0x18171615,
			RQPSN:         0x1c1b1a19,
			SQPSN:         0x201f1e1d,
			DestQPNum:     0x24232221,
			QPAccessFlags: AccessFlags(0x28272625),
			AHAttr: AHAttr{
				GRH: GlobalRoute{
					DGID:         [16]byte{0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38},
					FlowLabel:    0x3c3b3a39,
					SGIDIndex:    0x3d,
					HopLimit:     0x3e,
					TrafficClass: 0x3f,
				},
				DLID:        0x4241,
				SL:          0x43,
				SrcPathBits: 0x44,
				StaticRate:  0x45,
				IsGlobal:    0x46,
				PortNum:     0x47,
			},
			AltAHAttr: AHAttr{
				GRH: GlobalRoute{
					DGID:         [16]byte{0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58},
					FlowLabel:    0x5c5b5a59,
					SGIDIndex:    0x5d,
					HopLimit:     0x5e,
					TrafficClass: 0x5f,
				},
				DLID:        0x6261,
				SL:          0x63,
				SrcPathBits: 0x64,
				StaticRate:  0x65,
				IsGlobal:    0x66,
				PortNum:     0x67,
			},
			MaxSendWR:        0x6c6b6a69,
			MaxRecvWR:        0x706f6e6d,
			MaxSendSGE:       0x74737271,
			MaxRecvSGE:       0x78777675,
			MaxInlineData:    0x7c7b7a79,
			PKeyIndex:        0x7e7d,
			AltPKeyIndex:     0x807f,
			EnSQDAsyncNotify: 0x81,
			SQDraining:       0x82,
			MaxRdAtomic:      0x83,
			MaxDestRdAtomic:  0x84,
			MinRNRTimer:      0x85,
			PortNum:          0x86,
			Timeout:          0x87,
			RetryCnt:         0x88,
			RNRRetry:         0x89,
			AltPortNum:       0x8a,
			AltTimeout:       0x8b,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30
			31 32 33 34 35 36 37 38 39 3a 3b 3c 3d 3e 3f 00
			41 42 43 44 45 46 47 00 49 4a 4b 4c 4d 4e 4f 50
			51 52 53 54 55 56 57 58 59 5a 5b 5c 5d 5e 5f 00
			61 62 63 64 65 66 67 00 69 6a 6b 6c 6d 6e 6f 70
			71 72 73 74 75 76 77 78 79 7a 7b 7c 7d 7e 7f 80
			81 82 83 84 85 86 87 88 89 8a 8b 00 00 00 00 00
		`,
		reserved: [][2]int{{63, 64}, {71, 72}, {95, 96}, {103, 104}, {139, 144}},
	},
	{
		name: "ib_ucm_req_event_resp", size: 168,
		val: &REQEventResp{
			PrimaryPath: PathRec{
				DGID:                   [16]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10},
				SGID:                   [16]byte{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20},
				DLID:                   0x2122,
				SLID:                   0x2324,
				RawTraffic:             0x28272625,
				FlowLabel:              0x292a2b2c,
				Reversible:             0x302f2e2d,
				MTU:                    0x34333231,
				PKey:                   0x3536,
				HopLimit:               0x37,
				TrafficClass:           0x38,
				NumbPath:               0x39,
				SL:                     0x3a,
				MTUSelector:            0x3b,
				RateSelector:           0x3c,
				Rate:                   0x3d,
				PacketLifeTimeSelector: 0x3e,
				PacketLifeTime:         0x3f,
				Preference:             0x40,
			},
			AlternatePath: PathRec{
				DGID:                   [16]byte{0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50},
				SGID:                   [16]byte{0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60},
				DLID:                   0x6162,
				SLID:                   0x6364,
				RawTraffic:             0x68676665,
				FlowLabel:              0x696a6b6c,
				Reversible:             0x706f6e6d,
				MTU:                    0x74737271,
				PKey:                   0x7576,
				HopLimit:               0x77,
				TrafficClass:           0x78,
				NumbPath:               0x79,
				SL:                     0x7a,
				MTUSelector:            0x7b,
				RateSelector:           0x7c,
				Rate:                   0x7d,
				PacketLifeTimeSelector: 0x7e,
				PacketLifeTime:         0x7f,
				Preference:             0x80,
			},
			RemoteCAGUID:            0x8182838485868788,
			RemoteQKey:              0x8c8b8a89,
			RemoteQPN:               0x908f8e8d,
			QPType:                  QPType(0x94939291),
			StartingPSN:             0x98979695,
			ResponderResources:      0x99,
			InitiatorDepth:          0x9a,
			LocalCMResponseTimeout:  0x9b,
			FlowControl:             0x9c,
			RemoteCMResponseTimeout: 0x9d,
			RetryCount:              0x9e,
			RNRRetryCount:           0x9f,
			SRQ:                     0xa0,
			Port:                    0xa1,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30
			31 32 33 34 35 36 37 38 39 3a 3b 3c 3d 3e 3f 40
			41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f 50
			51 52 53 54 55 56 57 58 59 5a 5b 5c 5d 5e 5f 60
			61 62 63 64 65 66 67 68 69 6a 6b 6c 6d 6e 6f 70
			71 72 73 74 75 76 77 78 79 7a 7b 7c 7d 7e 7f 80
			81 82 83 84 85 86 87 88 89 8a 8b 8c 8d 8e 8f 90
			91 92 93 94 95 96 97 98 99 9a 9b 9c 9d 9e 9f a0
			a1 00 00 00 00 00 00 00
		`,
		reserved: [][2]int{{161, 168}},
	},
	{
		name: "ib_ucm_rep_event_resp", size: 32,
		val: &REPEventResp{
			RemoteCAGUID:       0x0102030405060708,
			RemoteQKey:         0x0c0b0a09,
			RemoteQPN:          0x100f0e0d,
			StartingPSN:        0x14131211,
			ResponderResources: 0x15,
			InitiatorDepth:     0x16,
			TargetAckDelay:     0x17,
			FailoverAccepted:   0x18,
			FlowControl:        0x19,
			RNRRetryCount:      0x1a,
			SRQ:                0x1b,
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 00 00 00 00 00
		`,
		reserved: [][2]int{{27, 32}},
	},
	{
		name: "ib_ucm_rej_event_resp", size: 4,
		val: &REJEventResp{Reason: 0x04030201},
		golden: `
			01 02 03 04
		`,
	},
	{
		name: "ib_ucm_mra_event_resp", size: 4,
		val: &MRAEventResp{Timeout: 0x01},
		golden: `
			01 00 00 00
		`,
		reserved: [][2]int{{1, 4}},
	},
	{
		name: "ib_ucm_lap_event_resp", size: 64,
		val: &LAPEventResp{
			Path: PathRec{
				DGID:                   [16]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10},
				SGID:                   [16]byte{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20},
				DLID:                   0x2122,
				SLID:                   0x2324,
				RawTraffic:             0x28272625,
				FlowLabel:              0x292a2b2c,
				Reversible:             0x302f2e2d,
				MTU:                    0x34333231,
				PKey:                   0x3536,
				HopLimit:               0x37,
				TrafficClass:           0x38,
				NumbPath:               0x39,
				SL:                     0x3a,
				MTUSelector:            0x3b,
				RateSelector:           0x3c,
				Rate:                   0x3d,
				PacketLifeTimeSelector: 0x3e,
				PacketLifeTime:         0x3f,
				Preference:             0x40,
			},
		},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10
			11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20
			21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30
			31 32 33 34 35 36 37 38 39 3a 3b 3c 3d 3e 3f 40
		`,
	},
	{
		name: "ib_ucm_apr_event_resp", size: 4,
		val: &APREventResp{Status: 0x04030201},
		golden: `
			01 02 03 04
		`,
	},
	{
		name: "ib_ucm_sidr_req_event_resp", size: 4,
		val: &SIDRREQEventResp{PKey: 0x0201, Port: 0x03},
		golden: `
			01 02 03 00
		`,
		reserved: [][2]int{{3, 4}},
	},
	{
		name: "ib_ucm_sidr_rep_event_resp", size: 12,
		val: &SIDRREPEventResp{Status: 0x04030201, QKey: 0x08070605, QPN: 0x0c0b0a09},
		golden: `
			01 02 03 04 05 06 07 08 09 0a 0b 0c
		`,
	},
}

func requireLittleEndian(t testing.TB) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are written for a little-endian host")
	}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad golden hex: %v", err)
	}
	return b
}

// newZero returns a new zero value of the same type as s.
func newZero(s Struct) Struct {
	return reflect.New(reflect.TypeOf(s).Elem()).Interface().(Struct)
}

func TestGolden(t *testing.T) {
	requireLittleEndian(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.golden)
			if len(want) != tc.size {
				t.Fatalf("golden has %d bytes, size says %d", len(want), tc.size)
			}
			if got := tc.val.Size(); got != tc.size {
				t.Fatalf("Size() = %d, want %d", got, tc.size)
			}

			// Encode into dirty memory: every byte, reserved ones included,
			// must be written, and nothing beyond Size.
			buf := bytes.Repeat([]byte{0xa5}, tc.size+8)
			tc.val.Encode(buf[:tc.size])
			if !bytes.Equal(buf[:tc.size], want) {
				t.Errorf("Encode:\n got %x\nwant %x", buf[:tc.size], want)
			}
			if !bytes.Equal(buf[tc.size:], bytes.Repeat([]byte{0xa5}, 8)) {
				t.Errorf("Encode wrote past Size: %x", buf[tc.size:])
			}

			got := newZero(tc.val)
			got.Decode(want)
			if !reflect.DeepEqual(got, tc.val) {
				t.Errorf("Decode:\n got %+v\nwant %+v", got, tc.val)
			}

			// Reserved bytes carry nothing.
			dirty := bytes.Clone(want)
			for _, r := range tc.reserved {
				for i := r[0]; i < r[1]; i++ {
					dirty[i] = 0xee
				}
			}
			got = newZero(tc.val)
			got.Decode(dirty)
			if !reflect.DeepEqual(got, tc.val) {
				t.Errorf("Decode with reserved bytes set:\n got %+v\nwant %+v", got, tc.val)
			}
		})
	}
}

// TestSizes pins the sizes the issue lists (ucm-abi.md §2.4, §2.5).
func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Struct
		want int
	}{
		{"cmd_hdr", &Header{}, 8},
		{"create_id", &CreateID{}, 16},
		{"destroy_id", &DestroyID{}, 16},
		{"attr_id", &AttrID{}, 16},
		{"init_qp_attr", &InitQPAttr{}, 16},
		{"listen", &Listen{}, 24},
		{"notify", &Notify{}, 8},
		{"private_data", &PrivateData{}, 16},
		{"req", &REQ{}, 64},
		{"rep", &REP{}, 40},
		{"info", &Info{}, 32},
		{"mra", &MRA{}, 16},
		{"lap", &LAP{}, 24},
		{"sidr_req", &SIDRREQ{}, 40},
		{"sidr_rep", &SIDRREP{}, 40},
		{"event_get", &EventGet{}, 32},
		{"create_id_resp", &CreateIDResp{}, 4},
		{"destroy_id_resp", &DestroyIDResp{}, 4},
		{"attr_id_resp", &AttrIDResp{}, 24},
		{"path_rec", &PathRec{}, 64},
		{"qp_attr", &QPAttr{}, 144},
		{"ah_attr", &AHAttr{}, 32},
		{"global_route", &GlobalRoute{}, 24},
		{"event_resp", &EventResp{}, 192},
		{"req_event_resp", &REQEventResp{}, 168},
		{"rep_event_resp", &REPEventResp{}, 32},
		{"rej_event_resp", &REJEventResp{}, 4},
		{"mra_event_resp", &MRAEventResp{}, 4},
		{"lap_event_resp", &LAPEventResp{}, 64},
		{"apr_event_resp", &APREventResp{}, 4},
		{"sidr_req_event_resp", &SIDRREQEventResp{}, 4},
		{"sidr_rep_event_resp", &SIDRREPEventResp{}, 12},
	} {
		if got := tc.s.Size(); got != tc.want {
			t.Errorf("%s: Size() = %d, want %d", tc.name, got, tc.want)
		}
	}
	if EventUnionOffset != 24 || EventUnionSize != 168 || len(EventUnion{}) != 168 {
		t.Errorf("event union at %d, %d bytes; want 24, 168", EventUnionOffset, len(EventUnion{}))
	}
	if EventUnionOffset+EventUnionSize != EventRespSize {
		t.Errorf("union does not end the event response")
	}
}

// Encode into a buffer that is too short panics, even when the slice has the
// capacity (a plain b[:n] would write into it unnoticed).
func TestEncodeShortPanics(t *testing.T) {
	for _, tc := range goldenCases {
		b := make([]byte, tc.size-1, tc.size+16)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Encode into %d bytes did not panic", tc.name, len(b))
				}
			}()
			tc.val.Encode(b)
		}()
	}
}

// Decode accepts any input: missing bytes read as zero.
func TestDecodeShort(t *testing.T) {
	requireLittleEndian(t)
	for _, tc := range goldenCases {
		want := unhex(t, tc.golden)
		for n := 0; n <= tc.size; n++ {
			got := newZero(tc.val)
			got.Decode(want[:n])
			padded := make([]byte, tc.size)
			copy(padded, want[:n])
			ref := newZero(tc.val)
			ref.Decode(padded)
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("%s: Decode of %d bytes = %+v, want %+v", tc.name, n, got, ref)
			}
		}
	}
}
