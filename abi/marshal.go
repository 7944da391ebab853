package abi

// encoding.BinaryMarshaler, BinaryAppender and BinaryUnmarshaler for every
// wire struct. AppendBinary does not allocate when b has room; the error is
// always nil. UnmarshalBinary, unlike Decode, wants exactly Size() bytes.

func (h *Header) MarshalBinary() ([]byte, error) { return h.AppendBinary(nil) }

func (h *Header) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, HeaderSize)
	h.Encode(w)
	return b, nil
}

func (h *Header) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_cmd_hdr", HeaderSize, b); err != nil {
		return err
	}
	h.Decode(b)
	return nil
}

func (c *CreateID) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *CreateID) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, CreateIDSize)
	c.Encode(w)
	return b, nil
}

func (c *CreateID) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_create_id", CreateIDSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *DestroyID) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *DestroyID) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, DestroyIDSize)
	c.Encode(w)
	return b, nil
}

func (c *DestroyID) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_destroy_id", DestroyIDSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *AttrID) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *AttrID) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, AttrIDSize)
	c.Encode(w)
	return b, nil
}

func (c *AttrID) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_attr_id", AttrIDSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *InitQPAttr) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *InitQPAttr) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, InitQPAttrSize)
	c.Encode(w)
	return b, nil
}

func (c *InitQPAttr) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_init_qp_attr", InitQPAttrSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *Listen) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *Listen) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, ListenSize)
	c.Encode(w)
	return b, nil
}

func (c *Listen) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_listen", ListenSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *Notify) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *Notify) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, NotifySize)
	c.Encode(w)
	return b, nil
}

func (c *Notify) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_notify", NotifySize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *PrivateData) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *PrivateData) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, PrivateDataSize)
	c.Encode(w)
	return b, nil
}

func (c *PrivateData) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_private_data", PrivateDataSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *REQ) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *REQ) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, REQSize)
	c.Encode(w)
	return b, nil
}

func (c *REQ) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_req", REQSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *REP) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *REP) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, REPSize)
	c.Encode(w)
	return b, nil
}

func (c *REP) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_rep", REPSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *Info) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *Info) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, InfoSize)
	c.Encode(w)
	return b, nil
}

func (c *Info) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_info", InfoSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *MRA) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *MRA) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, MRASize)
	c.Encode(w)
	return b, nil
}

func (c *MRA) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_mra", MRASize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *LAP) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *LAP) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, LAPSize)
	c.Encode(w)
	return b, nil
}

func (c *LAP) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_lap", LAPSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *SIDRREQ) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *SIDRREQ) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, SIDRREQSize)
	c.Encode(w)
	return b, nil
}

func (c *SIDRREQ) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_sidr_req", SIDRREQSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *SIDRREP) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *SIDRREP) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, SIDRREPSize)
	c.Encode(w)
	return b, nil
}

func (c *SIDRREP) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_sidr_rep", SIDRREPSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (c *EventGet) MarshalBinary() ([]byte, error) { return c.AppendBinary(nil) }

func (c *EventGet) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, EventGetSize)
	c.Encode(w)
	return b, nil
}

func (c *EventGet) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_event_get", EventGetSize, b); err != nil {
		return err
	}
	c.Decode(b)
	return nil
}

func (r *CreateIDResp) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

func (r *CreateIDResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, CreateIDRespSize)
	r.Encode(w)
	return b, nil
}

func (r *CreateIDResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_create_id_resp", CreateIDRespSize, b); err != nil {
		return err
	}
	r.Decode(b)
	return nil
}

func (r *DestroyIDResp) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

func (r *DestroyIDResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, DestroyIDRespSize)
	r.Encode(w)
	return b, nil
}

func (r *DestroyIDResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_destroy_id_resp", DestroyIDRespSize, b); err != nil {
		return err
	}
	r.Decode(b)
	return nil
}

func (r *AttrIDResp) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

func (r *AttrIDResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, AttrIDRespSize)
	r.Encode(w)
	return b, nil
}

func (r *AttrIDResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_attr_id_resp", AttrIDRespSize, b); err != nil {
		return err
	}
	r.Decode(b)
	return nil
}

func (p *PathRec) MarshalBinary() ([]byte, error) { return p.AppendBinary(nil) }

func (p *PathRec) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, PathRecSize)
	p.Encode(w)
	return b, nil
}

func (p *PathRec) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_user_path_rec", PathRecSize, b); err != nil {
		return err
	}
	p.Decode(b)
	return nil
}

func (g *GlobalRoute) MarshalBinary() ([]byte, error) { return g.AppendBinary(nil) }

func (g *GlobalRoute) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, GlobalRouteSize)
	g.Encode(w)
	return b, nil
}

func (g *GlobalRoute) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_uverbs_global_route", GlobalRouteSize, b); err != nil {
		return err
	}
	g.Decode(b)
	return nil
}

func (a *AHAttr) MarshalBinary() ([]byte, error) { return a.AppendBinary(nil) }

func (a *AHAttr) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, AHAttrSize)
	a.Encode(w)
	return b, nil
}

func (a *AHAttr) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_uverbs_ah_attr", AHAttrSize, b); err != nil {
		return err
	}
	a.Decode(b)
	return nil
}

func (q *QPAttr) MarshalBinary() ([]byte, error) { return q.AppendBinary(nil) }

func (q *QPAttr) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, QPAttrSize)
	q.Encode(w)
	return b, nil
}

func (q *QPAttr) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_uverbs_qp_attr", QPAttrSize, b); err != nil {
		return err
	}
	q.Decode(b)
	return nil
}

func (r *EventResp) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

func (r *EventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, EventRespSize)
	r.Encode(w)
	return b, nil
}

func (r *EventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_event_resp", EventRespSize, b); err != nil {
		return err
	}
	r.Decode(b)
	return nil
}

func (m *REQEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *REQEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, REQEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *REQEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_req_event_resp", REQEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *REPEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *REPEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, REPEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *REPEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_rep_event_resp", REPEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *REJEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *REJEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, REJEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *REJEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_rej_event_resp", REJEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *MRAEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *MRAEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, MRAEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *MRAEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_mra_event_resp", MRAEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *LAPEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *LAPEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, LAPEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *LAPEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_lap_event_resp", LAPEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *APREventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *APREventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, APREventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *APREventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_apr_event_resp", APREventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *SIDRREQEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *SIDRREQEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, SIDRREQEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *SIDRREQEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_sidr_req_event_resp", SIDRREQEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}

func (m *SIDRREPEventResp) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

func (m *SIDRREPEventResp) AppendBinary(b []byte) ([]byte, error) {
	b, w := grow(b, SIDRREPEventRespSize)
	m.Encode(w)
	return b, nil
}

func (m *SIDRREPEventResp) UnmarshalBinary(b []byte) error {
	if err := checkLen("ib_ucm_sidr_rep_event_resp", SIDRREPEventRespSize, b); err != nil {
		return err
	}
	m.Decode(b)
	return nil
}
