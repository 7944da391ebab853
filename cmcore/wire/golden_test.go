package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ucmd/ucmd/hw"
)

func gidSeq(first byte) (g hw.GID) {
	for i := range g {
		g[i] = first + byte(i)
	}
	return g
}

// Every case is a message with distinct field values and the bytes it must
// encode to, written by hand from the IBTA tables (data offsets on the
// left, comments naming the fields). Bytes not listed are zero.
var goldenCases = []struct {
	name string
	tid  uint64
	msg  Message
	hdr  string
	data string
}{
	{
		name: "REQ",
		tid:  0x0000000300000abc,
		msg: &REQ{
			LocalCommID:             0x11223344,
			ServiceID:               0x0102030405060708,
			LocalCAGUID:             0x1112131415161718,
			LocalQKey:               0x21222324,
			LocalQPN:                0x313233,
			ResponderResources:      0x34,
			LocalEECN:               0x414243,
			InitiatorDepth:          0x44,
			RemoteEECN:              0x515253,
			RemoteCMResponseTimeout: 0x15,
			TransportType:           2,
			EndToEndFlowControl:     true,
			StartingPSN:             0x616263,
			LocalCMResponseTimeout:  0x0b,
			RetryCount:              5,
			PartitionKey:            0x7172,
			PathMTU:                 5,
			RDCExists:               true,
			RNRRetryCount:           6,
			MaxCMRetries:            0xc,
			SRQ:                     true,
			ExtendedTransport:       1,
			Primary: Path{
				LocalLID: 0x8182, RemoteLID: 0x8384,
				LocalGID: gidSeq(0xa0), RemoteGID: gidSeq(0xb0),
				FlowLabel: 0xabcde, PacketRate: 0x2a, TrafficClass: 0xc1, HopLimit: 0xc2,
				SL: 0xd, SubnetLocal: true, LocalACKTimeout: 0x13,
			},
			Alternate: Path{
				LocalLID: 0x9192, RemoteLID: 0x9394,
				LocalGID: gidSeq(0xc0), RemoteGID: gidSeq(0xd0),
				FlowLabel: 0x12345, PacketRate: 0x11, TrafficClass: 0xe1, HopLimit: 0xe2,
				SL: 0x3, SubnetLocal: false, LocalACKTimeout: 0x1f,
			},
			SAPSupported: true,
			PrivateData:  []byte{0xee, 0xef},
		},
		hdr: "01070203 00000000 00000003 00000abc 00100000 00000000",
		data: `
		000: 11223344 00000000 01020304 05060708 # local comm ID | reserved | service ID
		010: 11121314 15161718 00000000 21222324 # CA GUID | reserved | Q_Key
		020: 31323334 41424344 515253ad 6162635d # QPN+RR | EECN+ID | rEECN+[10101 10 1] | PSN+[01011 101]
		030: 71725ec9 81828384 a0a1a2a3 a4a5a6a7 # P_Key [0101 1 110][1100 1 001] | LIDs | local GID
		040: a8a9aaab acadaeaf b0b1b2b3 b4b5b6b7 # | remote GID
		050: b8b9babb bcbdbebf abcde02a c1c2d898 # | flow<<12, rate | TC hop [1101 1 000] [10011 000]
		060: 91929394 c0c1c2c3 c4c5c6c7 c8c9cacb # alternate LIDs | local GID
		070: cccdcecf d0d1d2d3 d4d5d6d7 d8d9dadb # | remote GID
		080: dcdddedf 12345011 e1e230fc eeef     # | flow, rate | TC hop [0011 0 000] [11111 1 00] | private data
		`,
	},
	{
		name: "MRA",
		tid:  0x1234,
		msg:  &MRA{LocalCommID: 0x11223344, RemoteCommID: 0x55667788, MessageMRAed: MessageREP, ServiceTimeout: 0x15, PrivateData: []byte{0xa1, 0xa2, 0xa3}},
		hdr:  "01070203 00000000 00000000 00001234 00110000 00000000",
		data: `000: 11223344 55667788 40a8a1a2 a3 # IDs | [01 000000] [10101 000] | private data`,
	},
	{
		name: "REJ",
		tid:  0xfedcba9876543210,
		msg: &REJ{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MessageRejected: MessageOther, Reason: REJConsumerDefined,
			ARI: []byte{0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x02}, PrivateData: []byte{0xb1, 0xb2}},
		hdr: "01070203 00000000 fedcba98 76543210 00120000 00000000",
		data: `
		000: 01020304 05060708 8010001c 505400ff # IDs | [10 000000] [0001000 0] reason 28 | ARI
		010: fe770002
		050: 00000000 b1b2                       # private data at 84
		`,
	},
	{
		name: "REP",
		tid:  1,
		msg: &REP{LocalCommID: 0x0a0b0c0d, RemoteCommID: 0x1a1b1c1d, LocalQKey: 0x2a2b2c2d, LocalQPN: 0x3a3b3c,
			LocalEECN: 0x4a4b4c, StartingPSN: 0x5a5b5c, ResponderResources: 0x6a, InitiatorDepth: 0x6b,
			TargetACKDelay: 0x11, FailoverAccepted: FailoverUnsupported, EndToEndFlowControl: true,
			RNRRetryCount: 5, SRQ: true, LocalCAGUID: 0x7172737475767778, PrivateData: []byte{0xc1}},
		hdr: "01070203 00000000 00000000 00000001 00130000 00000000",
		data: `
		000: 0a0b0c0d 1a1b1c1d 2a2b2c2d 3a3b3c00 # IDs | Q_Key | QPN
		010: 4a4b4c00 5a5b5c00 6a6b8db0 71727374 # EECN | PSN | RR ID [10001 10 1] [101 1 0000] | CA GUID
		020: 75767778 c1                         # | private data at 36
		`,
	},
	{
		name: "RTU",
		tid:  2,
		msg:  &RTU{LocalCommID: 0xdeadbeef, RemoteCommID: 0x01234567, PrivateData: []byte{0xd1, 0xd2, 0xd3, 0xd4, 0xd5}},
		hdr:  "01070203 00000000 00000000 00000002 00140000 00000000",
		data: `000: deadbeef 01234567 d1d2d3d4 d5`,
	},
	{
		name: "DREQ",
		tid:  3,
		msg:  &DREQ{LocalCommID: 0x10203040, RemoteCommID: 0x50607080, RemoteQPN: 0xabcdef, PrivateData: []byte{0xe1}},
		hdr:  "01070203 00000000 00000000 00000003 00150000 00000000",
		data: `000: 10203040 50607080 abcdef00 e1`,
	},
	{
		name: "DREP",
		tid:  4,
		msg:  &DREP{LocalCommID: 0x0badcafe, RemoteCommID: 0x0ddba110, PrivateData: []byte{0xf1, 0xf2}},
		hdr:  "01070203 00000000 00000000 00000004 00160000 00000000",
		data: `000: 0badcafe 0ddba110 f1f2`,
	},
	{
		name: "LAP",
		tid:  5,
		msg: &LAP{LocalCommID: 0x1a2b3c4d, RemoteCommID: 0x5e6f7081, RemoteQPN: 0x929394, RemoteCMResponseTimeout: 0x1f,
			Alternate: Path{
				LocalLID: 0xa1a2, RemoteLID: 0xa3a4, LocalGID: gidSeq(0xb0), RemoteGID: gidSeq(0xc0),
				FlowLabel: 0xfedcb, TrafficClass: 0xd1, HopLimit: 0xd2, PacketRate: 0x25,
				SL: 0x9, SubnetLocal: true, LocalACKTimeout: 0x0e,
			},
			PrivateData: []byte{0xe5, 0xe6}},
		hdr: "01070203 00000000 00000000 00000005 00190000 00000000",
		data: `
		000: 1a2b3c4d 5e6f7081 00000000 929394f8 # IDs | reserved | QPN [11111 000]
		010: 00000000 a1a2a3a4 b0b1b2b3 b4b5b6b7 # reserved | LIDs | local GID
		020: b8b9babb bcbdbebf c0c1c2c3 c4c5c6c7 # | remote GID
		030: c8c9cacb cccdcecf fedcb0d1 d2259870 # | flow<<12 TC | hop [00 100101] [1001 1 000] [01110 000]
		040: e5e6                                # private data at 64
		`,
	},
	{
		name: "APR",
		tid:  6,
		msg:  &APR{LocalCommID: 0x31323334, RemoteCommID: 0x35363738, APStatus: APRIsCurrent, Info: []byte{0x11, 0x22, 0x33}, PrivateData: []byte{0x44}},
		hdr:  "01070203 00000000 00000000 00000006 001a0000 00000000",
		data: `
		000: 31323334 35363738 03050000 11223300 # IDs | info length, status, reserved | info
		050: 00000000 44                         # private data at 84
		`,
	},
	{
		name: "SIDR_REQ",
		tid:  7,
		msg:  &SIDRREQ{RequestID: 0x61626364, PartitionKey: 0x8001, ServiceID: 0x1020304050607080, PrivateData: []byte{0x99}},
		hdr:  "01070203 00000000 00000000 00000007 00170000 00000000",
		data: `
		000: 61626364 80010000 10203040 50607080 # request ID | P_Key, reserved | service ID
		010: 99
		`,
	},
	{
		name: "SIDR_REP",
		tid:  8,
		msg: &SIDRREP{RequestID: 0x71727374, Status: SIDRReject, QPN: 0x0a0b0c, ServiceID: 0xf1f2f3f4f5f6f7f8,
			QKey: 0x80010000, Info: []byte{0xaa, 0xbb}, PrivateData: []byte{0xcc}},
		hdr: "01070203 00000000 00000000 00000008 00180000 00000000",
		data: `
		000: 71727374 02020000 0a0b0c00 f1f2f3f4 # request ID | status, info length, reserved | QPN | service ID
		010: f5f6f7f8 80010000 aabb              # | Q_Key | info
		060: cc                                  # private data at 96
		`,
	},
}

func TestGolden(t *testing.T) {
	if len(goldenCases) != 11 {
		t.Fatalf("%d golden cases, want one per message", len(goldenCases))
	}
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			want := madOf(t, tc.hdr, tc.data)
			var got hw.MAD
			for i := range got {
				got[i] = 0x5a // Encode must overwrite every byte
			}
			if err := Encode(&got, tc.tid, tc.msg); err != nil {
				t.Fatalf("Encode: %v", err)
			}
			diffMAD(t, &got, want)

			h, m, err := Decode(want)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			wantHdr := Header{BaseVersion: 1, MgmtClass: 0x07, ClassVersion: 2, Method: 0x03, TID: tc.tid, AttrID: tc.msg.AttrID()}
			if h != wantHdr {
				t.Errorf("header = %+v, want %+v", h, wantHdr)
			}
			if exp := padded(tc.msg); !reflect.DeepEqual(m, exp) {
				t.Errorf("decoded\n%+v\nwant\n%+v", m, exp)
			}
			var again hw.MAD
			if err := Encode(&again, h.TID, m); err != nil {
				t.Fatalf("re-Encode: %v", err)
			}
			diffMAD(t, &again, want)
		})
	}
}

// Every field at its maximum: all defined bits one, so any bit the encoder
// sets outside a field's place shows up as a reserved bit, and every field
// boundary is exercised. Decoding a MAD with all bits set (reserved ones
// included) must give the same message: reserved bits are ignored.
var maxCases = []struct {
	name string
	msg  Message
	data string
}{
	{
		name: "REQ",
		msg: &REQ{
			LocalCommID: ^uint32(0), ServiceID: ^uint64(0), LocalCAGUID: ^uint64(0), LocalQKey: ^uint32(0),
			LocalQPN: 1<<24 - 1, ResponderResources: 0xff, LocalEECN: 1<<24 - 1, InitiatorDepth: 0xff,
			RemoteEECN: 1<<24 - 1, RemoteCMResponseTimeout: 31, TransportType: 3, EndToEndFlowControl: true,
			StartingPSN: 1<<24 - 1, LocalCMResponseTimeout: 31, RetryCount: 7, PartitionKey: 0xffff,
			PathMTU: 15, RDCExists: true, RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true, ExtendedTransport: 7,
			Primary: maxPath, Alternate: maxPath, SAPSupported: true,
			PrivateData: bytes.Repeat([]byte{0xff}, REQPrivateDataSize),
		},
		data: `
		000: ffffffff 00000000 ffffffff ffffffff # reserved 4..7
		010: ffffffff ffffffff 00000000 ffffffff # reserved 24..27
		020..057: ff
		058: fffff03f fffff8f8                   # flow 20 | 6 reserved | rate 6 ; SL, subnet local, 3 reserved; ACK timeout, 3 reserved
		060..083: ff
		084: fffff03f fffff8fc                   # alternate; SAP supported 0x04, 2 reserved
		08c..0e7: ff
		`,
	},
	{
		name: "MRA",
		msg:  &MRA{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), MessageMRAed: 3, ServiceTimeout: 31, PrivateData: bytes.Repeat([]byte{0xff}, MRAPrivateDataSize)},
		data: `
		000: ffffffff ffffffff c0f8 # 6 reserved | 3 reserved
		00a..0e7: ff
		`,
	},
	{
		name: "REJ",
		msg: &REJ{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), MessageRejected: 3, Reason: 0xffff,
			ARI: bytes.Repeat([]byte{0xff}, REJARISize), PrivateData: bytes.Repeat([]byte{0xff}, REJPrivateDataSize)},
		data: `
		000: ffffffff ffffffff c090ffff # 6 reserved | ARI length 72<<1, 1 reserved
		00c..0e7: ff
		`,
	},
	{
		name: "REP",
		msg: &REP{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), LocalQKey: ^uint32(0), LocalQPN: 1<<24 - 1,
			LocalEECN: 1<<24 - 1, StartingPSN: 1<<24 - 1, ResponderResources: 0xff, InitiatorDepth: 0xff,
			TargetACKDelay: 31, FailoverAccepted: 3, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true,
			LocalCAGUID: ^uint64(0), PrivateData: bytes.Repeat([]byte{0xff}, REPPrivateDataSize)},
		data: `
		000: ffffffff ffffffff ffffffff ffffff00 # QPN, reserved
		010: ffffff00 ffffff00 fffffff0          # EECN, PSN, RNR/SRQ + 4 reserved
		01c..0e7: ff
		`,
	},
	{
		name: "RTU",
		msg:  &RTU{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), PrivateData: bytes.Repeat([]byte{0xff}, RTUPrivateDataSize)},
		data: `000..0e7: ff`,
	},
	{
		name: "DREQ",
		msg:  &DREQ{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), RemoteQPN: 1<<24 - 1, PrivateData: bytes.Repeat([]byte{0xff}, DREQPrivateDataSize)},
		data: `
		000: ffffffff ffffffff ffffff00
		00c..0e7: ff
		`,
	},
	{
		name: "DREP",
		msg:  &DREP{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), PrivateData: bytes.Repeat([]byte{0xff}, DREPPrivateDataSize)},
		data: `000..0e7: ff`,
	},
	{
		name: "LAP",
		msg: &LAP{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), RemoteQPN: 1<<24 - 1, RemoteCMResponseTimeout: 31,
			Alternate: maxPath, PrivateData: bytes.Repeat([]byte{0xff}, LAPPrivateDataSize)},
		data: `
		000: ffffffff ffffffff 00000000 fffffff8 # reserved 8..11 | QPN, timeout, 3 reserved
		010: 00000000                            # reserved 16..19
		014..037: ff
		038: fffff0ff ff3ff8f8                   # flow, 4 reserved, TC | hop, 2 reserved + rate, SL/subnet local, ACK timeout
		040..0e7: ff
		`,
	},
	{
		name: "APR",
		msg: &APR{LocalCommID: ^uint32(0), RemoteCommID: ^uint32(0), APStatus: 0xff,
			Info: bytes.Repeat([]byte{0xff}, APRInfoSize), PrivateData: bytes.Repeat([]byte{0xff}, APRPrivateDataSize)},
		data: `
		000: ffffffff ffffffff 48ff0000 # info length 72 | status | reserved
		00c..0e7: ff
		`,
	},
	{
		name: "SIDR_REQ",
		msg:  &SIDRREQ{RequestID: ^uint32(0), PartitionKey: 0xffff, ServiceID: ^uint64(0), PrivateData: bytes.Repeat([]byte{0xff}, SIDRREQPrivateDataSize)},
		data: `
		000: ffffffff ffff0000
		008..0e7: ff
		`,
	},
	{
		name: "SIDR_REP",
		msg: &SIDRREP{RequestID: ^uint32(0), Status: 0xff, QPN: 1<<24 - 1, ServiceID: ^uint64(0), QKey: ^uint32(0),
			Info: bytes.Repeat([]byte{0xff}, SIDRREPInfoSize), PrivateData: bytes.Repeat([]byte{0xff}, SIDRREPPrivateDataSize)},
		data: `
		000: ffffffff ff480000 ffffff00 # status, info length 72, reserved | QPN, reserved
		00c..0e7: ff
		`,
	},
}

var maxPath = Path{
	LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: onesGID(), RemoteGID: onesGID(),
	FlowLabel: 1<<20 - 1, PacketRate: 63, TrafficClass: 0xff, HopLimit: 0xff, SL: 15, SubnetLocal: true, LocalACKTimeout: 31,
}

func onesGID() (g hw.GID) {
	for i := range g {
		g[i] = 0xff
	}
	return g
}

func TestMaxValuesReservedZero(t *testing.T) {
	if len(maxCases) != 11 {
		t.Fatalf("%d cases, want one per message", len(maxCases))
	}
	for _, tc := range maxCases {
		t.Run(tc.name, func(t *testing.T) {
			want := madOf(t, "01070203 00000000 00000000 00000000", tc.data)
			want[16], want[17] = 0, byte(tc.msg.AttrID())
			var got hw.MAD
			if err := Encode(&got, 0, tc.msg); err != nil {
				t.Fatalf("Encode: %v", err)
			}
			diffMAD(t, &got, want)

			// All ones, reserved bits included; length fields at their
			// largest valid value (a larger one is an error, tested below).
			ones := *want
			for i := HeaderSize; i < len(ones); i++ {
				ones[i] = 0xff
			}
			switch tc.msg.(type) {
			case *REJ:
				ones[HeaderSize+9] = REJARISize<<1 | 1
			case *APR:
				ones[HeaderSize+8] = APRInfoSize
			case *SIDRREP:
				ones[HeaderSize+5] = SIDRREPInfoSize
			}
			_, m, err := Decode(&ones)
			if err != nil {
				t.Fatalf("Decode all ones: %v", err)
			}
			if !reflect.DeepEqual(m, tc.msg) {
				t.Errorf("decoded all ones\n%+v\nwant\n%+v", m, tc.msg)
			}
		})
	}
}

func TestEncodeRejectsOverflow(t *testing.T) {
	long := func(n int) []byte { return make([]byte, n+1) }
	cases := []struct {
		name string
		msg  Message
		want error
	}{
		{"REQ local QPN", &REQ{LocalQPN: 1 << 24}, ErrFieldOverflow},
		{"REQ local EECN", &REQ{LocalEECN: 1 << 24}, ErrFieldOverflow},
		{"REQ remote EECN", &REQ{RemoteEECN: 1 << 24}, ErrFieldOverflow},
		{"REQ starting PSN", &REQ{StartingPSN: 1 << 24}, ErrFieldOverflow},
		{"REQ remote CM timeout", &REQ{RemoteCMResponseTimeout: 32}, ErrFieldOverflow},
		{"REQ transport type", &REQ{TransportType: 4}, ErrFieldOverflow},
		{"REQ local CM timeout", &REQ{LocalCMResponseTimeout: 32}, ErrFieldOverflow},
		{"REQ retry count", &REQ{RetryCount: 8}, ErrFieldOverflow},
		{"REQ path MTU", &REQ{PathMTU: 16}, ErrFieldOverflow},
		{"REQ RNR retry", &REQ{RNRRetryCount: 8}, ErrFieldOverflow},
		{"REQ max CM retries", &REQ{MaxCMRetries: 16}, ErrFieldOverflow},
		{"REQ extended transport", &REQ{ExtendedTransport: 8}, ErrFieldOverflow},
		{"REQ primary flow label", &REQ{Primary: Path{FlowLabel: 1 << 20}}, ErrFieldOverflow},
		{"REQ primary rate", &REQ{Primary: Path{PacketRate: 64}}, ErrFieldOverflow},
		{"REQ primary SL", &REQ{Primary: Path{SL: 16}}, ErrFieldOverflow},
		{"REQ primary ACK timeout", &REQ{Primary: Path{LocalACKTimeout: 32}}, ErrFieldOverflow},
		{"REQ alternate flow label", &REQ{Alternate: Path{FlowLabel: 1 << 20}}, ErrFieldOverflow},
		{"REQ alternate ACK timeout", &REQ{Alternate: Path{LocalACKTimeout: 32}}, ErrFieldOverflow},
		{"REQ private data", &REQ{PrivateData: long(REQPrivateDataSize)}, ErrTooLong},
		{"MRA message MRAed", &MRA{MessageMRAed: 4}, ErrFieldOverflow},
		{"MRA service timeout", &MRA{ServiceTimeout: 32}, ErrFieldOverflow},
		{"MRA private data", &MRA{PrivateData: long(MRAPrivateDataSize)}, ErrTooLong},
		{"REJ message rejected", &REJ{MessageRejected: 4}, ErrFieldOverflow},
		{"REJ ARI", &REJ{ARI: long(REJARISize)}, ErrTooLong},
		{"REJ private data", &REJ{PrivateData: long(REJPrivateDataSize)}, ErrTooLong},
		{"REP local QPN", &REP{LocalQPN: 1 << 24}, ErrFieldOverflow},
		{"REP local EECN", &REP{LocalEECN: 1 << 24}, ErrFieldOverflow},
		{"REP starting PSN", &REP{StartingPSN: 1 << 24}, ErrFieldOverflow},
		{"REP target ACK delay", &REP{TargetACKDelay: 32}, ErrFieldOverflow},
		{"REP failover", &REP{FailoverAccepted: 4}, ErrFieldOverflow},
		{"REP RNR retry", &REP{RNRRetryCount: 8}, ErrFieldOverflow},
		{"REP private data", &REP{PrivateData: long(REPPrivateDataSize)}, ErrTooLong},
		{"RTU private data", &RTU{PrivateData: long(RTUPrivateDataSize)}, ErrTooLong},
		{"DREQ remote QPN", &DREQ{RemoteQPN: 1 << 24}, ErrFieldOverflow},
		{"DREQ private data", &DREQ{PrivateData: long(DREQPrivateDataSize)}, ErrTooLong},
		{"DREP private data", &DREP{PrivateData: long(DREPPrivateDataSize)}, ErrTooLong},
		{"LAP remote QPN", &LAP{RemoteQPN: 1 << 24}, ErrFieldOverflow},
		{"LAP CM timeout", &LAP{RemoteCMResponseTimeout: 32}, ErrFieldOverflow},
		{"LAP flow label", &LAP{Alternate: Path{FlowLabel: 1 << 20}}, ErrFieldOverflow},
		{"LAP rate", &LAP{Alternate: Path{PacketRate: 64}}, ErrFieldOverflow},
		{"LAP SL", &LAP{Alternate: Path{SL: 16}}, ErrFieldOverflow},
		{"LAP private data", &LAP{PrivateData: long(LAPPrivateDataSize)}, ErrTooLong},
		{"APR info", &APR{Info: long(APRInfoSize)}, ErrTooLong},
		{"APR private data", &APR{PrivateData: long(APRPrivateDataSize)}, ErrTooLong},
		{"SIDR_REQ private data", &SIDRREQ{PrivateData: long(SIDRREQPrivateDataSize)}, ErrTooLong},
		{"SIDR_REP QPN", &SIDRREP{QPN: 1 << 24}, ErrFieldOverflow},
		{"SIDR_REP info", &SIDRREP{Info: long(SIDRREPInfoSize)}, ErrTooLong},
		{"SIDR_REP private data", &SIDRREP{PrivateData: long(SIDRREPPrivateDataSize)}, ErrTooLong},
	}
	for _, tc := range cases {
		var mad hw.MAD
		err := Encode(&mad, 0, tc.msg)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Encode error %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestEncodeRejectsNil(t *testing.T) {
	var mad hw.MAD
	for _, m := range []Message{nil, (*REQ)(nil), (*REJ)(nil), (*SIDRREP)(nil)} {
		if err := Encode(&mad, 0, m); err == nil {
			t.Errorf("Encode(%#v) succeeded", m)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := func() *hw.MAD {
		var m hw.MAD
		if err := Encode(&m, 9, &DREP{LocalCommID: 1}); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	cases := []struct {
		name  string
		patch func(m *hw.MAD)
		want  error
	}{
		{"base version 2", func(m *hw.MAD) { m[0] = 2 }, ErrNotCM},
		{"SA class", func(m *hw.MAD) { m[1] = 0x03 }, ErrNotCM},
		{"class version 1", func(m *hw.MAD) { m[2] = 1 }, ErrNotCM},
		{"GetResp method", func(m *hw.MAD) { m[3] = 0x81 }, ErrNotCM},
		{"ClassPortInfo", func(m *hw.MAD) { m[16], m[17] = 0x00, 0x01 }, ErrUnknownAttribute},
		{"attribute 0x1b", func(m *hw.MAD) { m[16], m[17] = 0x00, 0x1b }, ErrUnknownAttribute},
		{"attribute 0x0012 in high byte", func(m *hw.MAD) { m[16], m[17] = 0x12, 0x00 }, ErrUnknownAttribute},
	}
	for _, tc := range cases {
		m := valid()
		tc.patch(m)
		h, msg, err := Decode(m)
		if !errors.Is(err, tc.want) || msg != nil {
			t.Errorf("%s: Decode = %v, %v; want error %v", tc.name, msg, err, tc.want)
		}
		if h.TID != 9 {
			t.Errorf("%s: header not returned with the error: %+v", tc.name, h)
		}
	}
}

// A length field past its area (REJ's 7-bit ARI length up to 127, APR's and
// SIDR_REP's 8-bit info lengths up to 255, for 72-byte areas) is cut to the
// area, and the message is handled rather than dropped.
func TestOverlongLengthsAreCut(t *testing.T) {
	fill := func(m Message) *hw.MAD {
		var mad hw.MAD
		if err := Encode(&mad, 9, m); err != nil {
			t.Fatal(err)
		}
		for i := HeaderSize; i < hw.MADSize; i++ {
			if mad[i] == 0 {
				mad[i] = byte(i)
			}
		}
		return &mad
	}
	area := bytes.Repeat([]byte{0xa5}, 72)
	cases := []struct {
		name  string
		mad   *hw.MAD
		patch func(m *hw.MAD)
		info  func(Message) []byte
	}{
		{"REJ ARI length 73", fill(&REJ{Reason: 28, ARI: area}), func(m *hw.MAD) { m[HeaderSize+9] = 73 << 1 }, func(m Message) []byte { return m.(*REJ).ARI }},
		{"REJ ARI length 127", fill(&REJ{Reason: 28, ARI: area}), func(m *hw.MAD) { m[HeaderSize+9] = 0xfe }, func(m Message) []byte { return m.(*REJ).ARI }},
		{"APR info length 73", fill(&APR{APStatus: 2, Info: area}), func(m *hw.MAD) { m[HeaderSize+8] = 73 }, func(m Message) []byte { return m.(*APR).Info }},
		{"SIDR_REP info length 255", fill(&SIDRREP{Status: 1, Info: area}), func(m *hw.MAD) { m[HeaderSize+5] = 0xff }, func(m Message) []byte { return m.(*SIDRREP).Info }},
	}
	for _, tc := range cases {
		tc.patch(tc.mad)
		h, m, err := Decode(tc.mad)
		if err != nil || h.TID != 9 {
			t.Errorf("%s: Decode = %+v, %v", tc.name, h, err)
			continue
		}
		if got := tc.info(m); !bytes.Equal(got, area) {
			t.Errorf("%s: %d bytes %x, want the whole 72-byte area", tc.name, len(got), got)
		}
	}
}

// A decoded message must not alias the MAD it came from: receive buffers
// are reused.
func TestDecodeDoesNotAlias(t *testing.T) {
	var mad hw.MAD
	if err := Encode(&mad, 0, &REJ{ARI: []byte{1, 2}, PrivateData: []byte{3}}); err != nil {
		t.Fatal(err)
	}
	_, m, err := Decode(&mad)
	if err != nil {
		t.Fatal(err)
	}
	clear(mad[:])
	r := m.(*REJ)
	if !bytes.Equal(r.ARI, []byte{1, 2}) || r.PrivateData[0] != 3 {
		t.Errorf("decoded REJ changed with its MAD: ARI %x, private data %x", r.ARI, r.PrivateData[:1])
	}
}
