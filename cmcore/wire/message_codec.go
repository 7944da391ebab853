package wire

// Per-message encode and decode. Decode allocates each message together
// with the arrays backing its byte slices: one allocation per message.

func (m *REQ) encode(e *encoder) {
	if !e.start("REQ", m == nil) {
		return
	}
	e.put(&reqLocalCommID, uint64(m.LocalCommID))
	e.put(&reqServiceID, m.ServiceID)
	e.put(&reqLocalCAGUID, m.LocalCAGUID)
	e.put(&reqLocalQKey, uint64(m.LocalQKey))
	e.put(&reqLocalQPN, uint64(m.LocalQPN))
	e.put(&reqResponderResources, uint64(m.ResponderResources))
	e.put(&reqLocalEECN, uint64(m.LocalEECN))
	e.put(&reqInitiatorDepth, uint64(m.InitiatorDepth))
	e.put(&reqRemoteEECN, uint64(m.RemoteEECN))
	e.put(&reqRemoteCMResponseTimeout, uint64(m.RemoteCMResponseTimeout))
	e.put(&reqTransportType, uint64(m.TransportType))
	e.flag(&reqEndToEndFlowControl, m.EndToEndFlowControl)
	e.put(&reqStartingPSN, uint64(m.StartingPSN))
	e.put(&reqLocalCMResponseTimeout, uint64(m.LocalCMResponseTimeout))
	e.put(&reqRetryCount, uint64(m.RetryCount))
	e.put(&reqPartitionKey, uint64(m.PartitionKey))
	e.put(&reqPathMTU, uint64(m.PathMTU))
	e.flag(&reqRDCExists, m.RDCExists)
	e.put(&reqRNRRetryCount, uint64(m.RNRRetryCount))
	e.put(&reqMaxCMRetries, uint64(m.MaxCMRetries))
	e.flag(&reqSRQ, m.SRQ)
	e.put(&reqExtendedTransport, uint64(m.ExtendedTransport))
	e.path(&reqPrimary, &m.Primary)
	e.path(&reqAlternate, &m.Alternate)
	e.flag(&reqSAPSupported, m.SAPSupported)
	e.bytes(reqPrivateData, m.PrivateData)
}

func decodeREQ(d []byte) (*REQ, error) {
	b := new(struct {
		m  REQ
		pd [REQPrivateDataSize]byte
	})
	b.m = REQ{
		LocalCommID:             uint32(reqLocalCommID.get(d)),
		ServiceID:               reqServiceID.get(d),
		LocalCAGUID:             reqLocalCAGUID.get(d),
		LocalQKey:               uint32(reqLocalQKey.get(d)),
		LocalQPN:                uint32(reqLocalQPN.get(d)),
		ResponderResources:      uint8(reqResponderResources.get(d)),
		LocalEECN:               uint32(reqLocalEECN.get(d)),
		InitiatorDepth:          uint8(reqInitiatorDepth.get(d)),
		RemoteEECN:              uint32(reqRemoteEECN.get(d)),
		RemoteCMResponseTimeout: uint8(reqRemoteCMResponseTimeout.get(d)),
		TransportType:           uint8(reqTransportType.get(d)),
		EndToEndFlowControl:     reqEndToEndFlowControl.get(d) != 0,
		StartingPSN:             uint32(reqStartingPSN.get(d)),
		LocalCMResponseTimeout:  uint8(reqLocalCMResponseTimeout.get(d)),
		RetryCount:              uint8(reqRetryCount.get(d)),
		PartitionKey:            uint16(reqPartitionKey.get(d)),
		PathMTU:                 uint8(reqPathMTU.get(d)),
		RDCExists:               reqRDCExists.get(d) != 0,
		RNRRetryCount:           uint8(reqRNRRetryCount.get(d)),
		MaxCMRetries:            uint8(reqMaxCMRetries.get(d)),
		SRQ:                     reqSRQ.get(d) != 0,
		ExtendedTransport:       uint8(reqExtendedTransport.get(d)),
		Primary:                 decodePath(d, &reqPrimary),
		Alternate:               decodePath(d, &reqAlternate),
		SAPSupported:            reqSAPSupported.get(d) != 0,
		PrivateData:             b.pd[:],
	}
	copy(b.pd[:], reqPrivateData.get(d))
	return &b.m, nil
}

func (m *MRA) encode(e *encoder) {
	if !e.start("MRA", m == nil) {
		return
	}
	e.put(&mraLocalCommID, uint64(m.LocalCommID))
	e.put(&mraRemoteCommID, uint64(m.RemoteCommID))
	e.put(&mraMessageMRAed, uint64(m.MessageMRAed))
	e.put(&mraServiceTimeout, uint64(m.ServiceTimeout))
	e.bytes(mraPrivateData, m.PrivateData)
}

func decodeMRA(d []byte) (*MRA, error) {
	b := new(struct {
		m  MRA
		pd [MRAPrivateDataSize]byte
	})
	b.m = MRA{
		LocalCommID:    uint32(mraLocalCommID.get(d)),
		RemoteCommID:   uint32(mraRemoteCommID.get(d)),
		MessageMRAed:   uint8(mraMessageMRAed.get(d)),
		ServiceTimeout: uint8(mraServiceTimeout.get(d)),
		PrivateData:    b.pd[:],
	}
	copy(b.pd[:], mraPrivateData.get(d))
	return &b.m, nil
}

func (m *REJ) encode(e *encoder) {
	if !e.start("REJ", m == nil) {
		return
	}
	e.put(&rejLocalCommID, uint64(m.LocalCommID))
	e.put(&rejRemoteCommID, uint64(m.RemoteCommID))
	e.put(&rejMessageRejected, uint64(m.MessageRejected))
	e.bytes(rejARI, m.ARI)
	e.put(&rejARILength, uint64(len(m.ARI)))
	e.put(&rejReason, uint64(m.Reason))
	e.bytes(rejPrivateData, m.PrivateData)
}

func decodeREJ(d []byte) (*REJ, error) {
	ari, n := variable(d, rejARI, &rejARILength)
	b := new(struct {
		m   REJ
		ari [REJARISize]byte
		pd  [REJPrivateDataSize]byte
	})
	b.m = REJ{
		LocalCommID:     uint32(rejLocalCommID.get(d)),
		RemoteCommID:    uint32(rejRemoteCommID.get(d)),
		MessageRejected: uint8(rejMessageRejected.get(d)),
		Reason:          uint16(rejReason.get(d)),
		ARI:             fit(b.ari[:], n),
		PrivateData:     b.pd[:],
	}
	copy(b.ari[:], ari[:n])
	copy(b.pd[:], rejPrivateData.get(d))
	return &b.m, nil
}

func (m *REP) encode(e *encoder) {
	if !e.start("REP", m == nil) {
		return
	}
	e.put(&repLocalCommID, uint64(m.LocalCommID))
	e.put(&repRemoteCommID, uint64(m.RemoteCommID))
	e.put(&repLocalQKey, uint64(m.LocalQKey))
	e.put(&repLocalQPN, uint64(m.LocalQPN))
	e.put(&repLocalEECN, uint64(m.LocalEECN))
	e.put(&repStartingPSN, uint64(m.StartingPSN))
	e.put(&repResponderResources, uint64(m.ResponderResources))
	e.put(&repInitiatorDepth, uint64(m.InitiatorDepth))
	e.put(&repTargetACKDelay, uint64(m.TargetACKDelay))
	e.put(&repFailoverAccepted, uint64(m.FailoverAccepted))
	e.flag(&repEndToEndFlowControl, m.EndToEndFlowControl)
	e.put(&repRNRRetryCount, uint64(m.RNRRetryCount))
	e.flag(&repSRQ, m.SRQ)
	e.put(&repLocalCAGUID, m.LocalCAGUID)
	e.bytes(repPrivateData, m.PrivateData)
}

func decodeREP(d []byte) (*REP, error) {
	b := new(struct {
		m  REP
		pd [REPPrivateDataSize]byte
	})
	b.m = REP{
		LocalCommID:         uint32(repLocalCommID.get(d)),
		RemoteCommID:        uint32(repRemoteCommID.get(d)),
		LocalQKey:           uint32(repLocalQKey.get(d)),
		LocalQPN:            uint32(repLocalQPN.get(d)),
		LocalEECN:           uint32(repLocalEECN.get(d)),
		StartingPSN:         uint32(repStartingPSN.get(d)),
		ResponderResources:  uint8(repResponderResources.get(d)),
		InitiatorDepth:      uint8(repInitiatorDepth.get(d)),
		TargetACKDelay:      uint8(repTargetACKDelay.get(d)),
		FailoverAccepted:    uint8(repFailoverAccepted.get(d)),
		EndToEndFlowControl: repEndToEndFlowControl.get(d) != 0,
		RNRRetryCount:       uint8(repRNRRetryCount.get(d)),
		SRQ:                 repSRQ.get(d) != 0,
		LocalCAGUID:         repLocalCAGUID.get(d),
		PrivateData:         b.pd[:],
	}
	copy(b.pd[:], repPrivateData.get(d))
	return &b.m, nil
}

func (m *RTU) encode(e *encoder) {
	if !e.start("RTU", m == nil) {
		return
	}
	e.put(&rtuLocalCommID, uint64(m.LocalCommID))
	e.put(&rtuRemoteCommID, uint64(m.RemoteCommID))
	e.bytes(rtuPrivateData, m.PrivateData)
}

func decodeRTU(d []byte) (*RTU, error) {
	b := new(struct {
		m  RTU
		pd [RTUPrivateDataSize]byte
	})
	b.m = RTU{
		LocalCommID:  uint32(rtuLocalCommID.get(d)),
		RemoteCommID: uint32(rtuRemoteCommID.get(d)),
		PrivateData:  b.pd[:],
	}
	copy(b.pd[:], rtuPrivateData.get(d))
	return &b.m, nil
}

func (m *DREQ) encode(e *encoder) {
	if !e.start("DREQ", m == nil) {
		return
	}
	e.put(&dreqLocalCommID, uint64(m.LocalCommID))
	e.put(&dreqRemoteCommID, uint64(m.RemoteCommID))
	e.put(&dreqRemoteQPN, uint64(m.RemoteQPN))
	e.bytes(dreqPrivateData, m.PrivateData)
}

func decodeDREQ(d []byte) (*DREQ, error) {
	b := new(struct {
		m  DREQ
		pd [DREQPrivateDataSize]byte
	})
	b.m = DREQ{
		LocalCommID:  uint32(dreqLocalCommID.get(d)),
		RemoteCommID: uint32(dreqRemoteCommID.get(d)),
		RemoteQPN:    uint32(dreqRemoteQPN.get(d)),
		PrivateData:  b.pd[:],
	}
	copy(b.pd[:], dreqPrivateData.get(d))
	return &b.m, nil
}

func (m *DREP) encode(e *encoder) {
	if !e.start("DREP", m == nil) {
		return
	}
	e.put(&drepLocalCommID, uint64(m.LocalCommID))
	e.put(&drepRemoteCommID, uint64(m.RemoteCommID))
	e.bytes(drepPrivateData, m.PrivateData)
}

func decodeDREP(d []byte) (*DREP, error) {
	b := new(struct {
		m  DREP
		pd [DREPPrivateDataSize]byte
	})
	b.m = DREP{
		LocalCommID:  uint32(drepLocalCommID.get(d)),
		RemoteCommID: uint32(drepRemoteCommID.get(d)),
		PrivateData:  b.pd[:],
	}
	copy(b.pd[:], drepPrivateData.get(d))
	return &b.m, nil
}

func (m *LAP) encode(e *encoder) {
	if !e.start("LAP", m == nil) {
		return
	}
	e.put(&lapLocalCommID, uint64(m.LocalCommID))
	e.put(&lapRemoteCommID, uint64(m.RemoteCommID))
	e.put(&lapRemoteQPN, uint64(m.RemoteQPN))
	e.put(&lapRemoteCMResponseTimeout, uint64(m.RemoteCMResponseTimeout))
	e.path(&lapAlternate, &m.Alternate)
	e.bytes(lapPrivateData, m.PrivateData)
}

func decodeLAP(d []byte) (*LAP, error) {
	b := new(struct {
		m  LAP
		pd [LAPPrivateDataSize]byte
	})
	b.m = LAP{
		LocalCommID:             uint32(lapLocalCommID.get(d)),
		RemoteCommID:            uint32(lapRemoteCommID.get(d)),
		RemoteQPN:               uint32(lapRemoteQPN.get(d)),
		RemoteCMResponseTimeout: uint8(lapRemoteCMResponseTimeout.get(d)),
		Alternate:               decodePath(d, &lapAlternate),
		PrivateData:             b.pd[:],
	}
	copy(b.pd[:], lapPrivateData.get(d))
	return &b.m, nil
}

func (m *APR) encode(e *encoder) {
	if !e.start("APR", m == nil) {
		return
	}
	e.put(&aprLocalCommID, uint64(m.LocalCommID))
	e.put(&aprRemoteCommID, uint64(m.RemoteCommID))
	e.bytes(aprInfo, m.Info)
	e.put(&aprInfoLength, uint64(len(m.Info)))
	e.put(&aprAPStatus, uint64(m.APStatus))
	e.bytes(aprPrivateData, m.PrivateData)
}

func decodeAPR(d []byte) (*APR, error) {
	info, n := variable(d, aprInfo, &aprInfoLength)
	b := new(struct {
		m    APR
		info [APRInfoSize]byte
		pd   [APRPrivateDataSize]byte
	})
	b.m = APR{
		LocalCommID:  uint32(aprLocalCommID.get(d)),
		RemoteCommID: uint32(aprRemoteCommID.get(d)),
		APStatus:     uint8(aprAPStatus.get(d)),
		Info:         fit(b.info[:], n),
		PrivateData:  b.pd[:],
	}
	copy(b.info[:], info[:n])
	copy(b.pd[:], aprPrivateData.get(d))
	return &b.m, nil
}

func (m *SIDRREQ) encode(e *encoder) {
	if !e.start("SIDR_REQ", m == nil) {
		return
	}
	e.put(&sidrREQRequestID, uint64(m.RequestID))
	e.put(&sidrREQPartitionKey, uint64(m.PartitionKey))
	e.put(&sidrREQServiceID, m.ServiceID)
	e.bytes(sidrREQPrivateData, m.PrivateData)
}

func decodeSIDRREQ(d []byte) (*SIDRREQ, error) {
	b := new(struct {
		m  SIDRREQ
		pd [SIDRREQPrivateDataSize]byte
	})
	b.m = SIDRREQ{
		RequestID:    uint32(sidrREQRequestID.get(d)),
		PartitionKey: uint16(sidrREQPartitionKey.get(d)),
		ServiceID:    sidrREQServiceID.get(d),
		PrivateData:  b.pd[:],
	}
	copy(b.pd[:], sidrREQPrivateData.get(d))
	return &b.m, nil
}

func (m *SIDRREP) encode(e *encoder) {
	if !e.start("SIDR_REP", m == nil) {
		return
	}
	e.put(&sidrREPRequestID, uint64(m.RequestID))
	e.put(&sidrREPStatus, uint64(m.Status))
	e.bytes(sidrREPInfo, m.Info)
	e.put(&sidrREPInfoLength, uint64(len(m.Info)))
	e.put(&sidrREPQPN, uint64(m.QPN))
	e.put(&sidrREPServiceID, m.ServiceID)
	e.put(&sidrREPQKey, uint64(m.QKey))
	e.bytes(sidrREPPrivateData, m.PrivateData)
}

func decodeSIDRREP(d []byte) (*SIDRREP, error) {
	info, n := variable(d, sidrREPInfo, &sidrREPInfoLength)
	b := new(struct {
		m    SIDRREP
		info [SIDRREPInfoSize]byte
		pd   [SIDRREPPrivateDataSize]byte
	})
	b.m = SIDRREP{
		RequestID:   uint32(sidrREPRequestID.get(d)),
		Status:      uint8(sidrREPStatus.get(d)),
		QPN:         uint32(sidrREPQPN.get(d)),
		ServiceID:   sidrREPServiceID.get(d),
		QKey:        uint32(sidrREPQKey.get(d)),
		Info:        fit(b.info[:], n),
		PrivateData: b.pd[:],
	}
	copy(b.info[:], info[:n])
	copy(b.pd[:], sidrREPPrivateData.get(d))
	return &b.m, nil
}

// fit returns the first n bytes of buf, or nil when n is 0 so that an empty
// ARI or info decodes like an unset one.
func fit(buf []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	return buf[:n:n]
}
