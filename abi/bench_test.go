package abi

import "testing"

// A SEND_REQ write as libibcm sends it (72 bytes).
func reqWrite() []byte {
	req := REQ{
		ID: 3, QPN: 0x1234, QPType: QPTypeRC, PSN: 0x1234, SID: 0x1000,
		PrimaryPath: 0x7ffd0000a000, Data: 0x7ffd0000b000, Len: 92,
		ResponderResources: 4, InitiatorDepth: 4, RemoteCMResponseTimeout: 20,
		LocalCMResponseTimeout: 20, RetryCount: 5, RNRRetryCount: 5, MaxCMRetries: 5,
	}
	body := make([]byte, REQSize)
	req.Encode(body)
	return writeOf(CmdSendREQ, REQSize, 0, body)
}

// ParseCommand: header checks plus the typed command (one small allocation
// for the struct behind the interface).
func BenchmarkParseCommandREQ(b *testing.B) {
	w := reqWrite()
	b.ReportAllocs()
	b.SetBytes(int64(len(w)))
	for b.Loop() {
		if _, c, err := ParseCommand(w); err != nil || c.(*REQ).ID != 3 {
			b.Fatal(c, err)
		}
	}
}

// Decoder.Parse: ParseCommand into the Decoder's own REQ, no allocation.
func BenchmarkDecoderParseREQ(b *testing.B) {
	w := reqWrite()
	var d Decoder
	b.ReportAllocs()
	b.SetBytes(int64(len(w)))
	for b.Loop() {
		if _, c, err := d.Parse(w); err != nil || c.(*REQ).ID != 3 {
			b.Fatal(c, err)
		}
	}
}

// ParseHeader plus Decode into a caller-owned REQ: the allocation-free path.
func BenchmarkDecodeREQ(b *testing.B) {
	w := reqWrite()
	b.ReportAllocs()
	b.SetBytes(int64(len(w)))
	for b.Loop() {
		h, err := ParseHeader(w)
		if err != nil || h.Cmd != CmdSendREQ {
			b.Fatal(h, err)
		}
		var req REQ
		req.Decode(w[HeaderSize:])
		if req.ID != 3 {
			b.Fatal(req)
		}
	}
}

// Filling and encoding a REQ_RECEIVED event response, the largest union
// member, into a reused buffer.
func BenchmarkEncodeEventRespREQ(b *testing.B) {
	path := PathRec{DLID: 1, SLID: 2, MTU: 5, PKey: 0xffff, HopLimit: 1, PacketLifeTime: 18, NumbPath: 1}
	buf := make([]byte, EventRespSize)
	b.ReportAllocs()
	b.SetBytes(EventRespSize)
	for b.Loop() {
		r := EventResp{UID: 0x7f0000001000, ID: 4, Event: CMREQReceived, Present: PresData | PresPrimary}
		r.U.SetREQ(REQEventResp{
			PrimaryPath: path, RemoteCAGUID: 0x0002c90300a1b2c3, RemoteQPN: 0x48,
			QPType: QPTypeRC, StartingPSN: 0x48, ResponderResources: 4, InitiatorDepth: 4,
			RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, RetryCount: 5, RNRRetryCount: 5, Port: 1,
		})
		r.Encode(buf)
	}
}

// Encoding the INIT_QP_ATTR response.
func BenchmarkEncodeQPAttr(b *testing.B) {
	q := QPAttr{QPAttrMask: QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
		QPState: QPStateRTR, PathMTU: 5, DestQPNum: 0x48, RQPSN: 0x48,
		AHAttr: AHAttr{DLID: 1, PortNum: 1}}
	buf := make([]byte, QPAttrSize)
	b.ReportAllocs()
	b.SetBytes(QPAttrSize)
	for b.Loop() {
		q.Encode(buf)
	}
}
